"""Records as JSON lines, the output of `cfp read` (and what the benchmarks time).

`--format native` (the default) writes each record's JSON line as the decoder made it for the
whole window (`ShardBatch.json_lines`): a view of the window's lines, no copy and no Python
object per record.
The other formats are documents about each event (`observers.formats.format_lines`), made from
the batch's change log columns: one dict per document, no `ChangeEvent`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial

import orjson

from observers.events import ArrowBatch
from observers.formats import Format, format_lines
from observers.origin import Origin
from processor.changefeed.decoding.decode import RawRecord
from processor.changefeed.shard_batch import ShardBatch
from processor.changefeed.storage.layout import shard_name

_dump_line = partial(orjson.dumps, option=orjson.OPT_APPEND_NEWLINE)


def json_lines(records: Iterable[RawRecord]) -> bytes:
    """One compact JSON object per record (Python dicts), each ending in a newline (UTF-8, keys
    in order): what `ShardBatch.json_lines` writes of the same records as columns."""
    return b"".join(map(_dump_line, records))


def formatted_lines(
    batch: ShardBatch, count: int, fmt: Format, *, processor: str, read_at: datetime
) -> bytes | memoryview:
    """The first `count` records of `batch` as JSON lines in `fmt`; `processor` and `read_at`
    as the origin's."""
    if fmt is Format.NATIVE:
        return batch.json_lines(count)
    arrow = ArrowBatch(
        batch.table.slice(0, count),
        batch.positions().slice(0, count),
        # the lease "00", as a host's events name it
        Origin(shard_name(batch.shard), batch.segment, processor, read_at),
        json=lambda: batch.json().slice(0, count),
    )
    return format_lines(arrow, fmt)
