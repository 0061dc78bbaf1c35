"""Records as JSON lines, the output of `cfp read` (and what the benchmark times)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import partial

import orjson

from observers.formats import Format, render
from observers.protocol import EventBatch
from processor.changefeed.layout import shard_name
from processor.changefeed.position import RawRecord, ShardBatch

_dump_line = partial(orjson.dumps, option=orjson.OPT_APPEND_NEWLINE)


def json_lines(records: Iterable[RawRecord]) -> bytes:
    """One compact JSON object per record, each ending in a newline (UTF-8, keys in order)."""
    return b"".join(map(_dump_line, records))


def formatted_lines(
    batch: ShardBatch,
    records: Sequence[RawRecord],
    fmt: Format,
    *,
    stream_name: str,
    read_timestamp: datetime,
) -> bytes:
    """`records` (the first records of `batch`) as JSON lines in `fmt`."""
    if fmt is Format.NATIVE:
        return json_lines(records)
    events = EventBatch(
        records,
        batch.event_positions()[: len(records)],
        shard=shard_name(batch.shard),  # "00", as a host's events name it
        segment=batch.segment,
        stream_name=stream_name,
        read_timestamp=read_timestamp,
    )
    return b"".join(_dump_line(render(e, fmt)) for e in events)
