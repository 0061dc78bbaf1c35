"""Records as JSON lines, the output of `cfp read` (and what the benchmarks time).

`--format native` (the default) writes each record's JSON as the decoder made it for the whole
window (`ShardBatch.json`), a newline after each, in one buffer: no Python object per record.
The other formats are documents about each event (`observers.formats.format_lines`), made from
the batch's change log columns: one dict per document, no `ChangeEvent`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from observers.events import ArrowBatch
from observers.formats import Format, format_lines
from processor.changefeed.layout import shard_name
from processor.changefeed.position import RawRecord, ShardBatch

_dump_line = partial(orjson.dumps, option=orjson.OPT_APPEND_NEWLINE)


def json_lines(records: Iterable[RawRecord]) -> bytes:
    """One compact JSON object per record (Python dicts), each ending in a newline (UTF-8, keys
    in order): what `arrow_lines` writes of the same records as columns."""
    return b"".join(map(_dump_line, records))


def arrow_lines(texts: pa.Array) -> bytes:
    """A column of JSON texts as one buffer of lines (each text and a newline)."""
    if len(texts) == 0:
        return b""
    kind = texts.type
    lines = pc.binary_join_element_wise(texts, pa.scalar("", kind), pa.scalar("\n", kind))
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    _, offsets, data = lines.buffers()
    ends = np.frombuffer(offsets, dtype=width)[lines.offset : lines.offset + len(lines) + 1]
    return data.to_pybytes()[int(ends[0]) : int(ends[-1])]  # type: ignore[no-any-return]


def formatted_lines(
    batch: ShardBatch, count: int, fmt: Format, *, stream_name: str, read_timestamp: datetime
) -> bytes:
    """The first `count` records of `batch` as JSON lines in `fmt`."""
    if fmt is Format.NATIVE:
        return arrow_lines(batch.json().slice(0, count))
    arrow = ArrowBatch(
        batch.table.slice(0, count),
        batch.positions().slice(0, count),
        shard=shard_name(batch.shard),  # "00", as a host's events name it
        segment=batch.segment,
        stream_name=stream_name,
        read_timestamp=read_timestamp,
        json=lambda: batch.json().slice(0, count),
    )
    return format_lines(arrow, fmt)
