"""What an executor does with one partition: read the blocks of a chunk range, decode them into
Arrow columns (the columnar path of the hosts), filter them, and make change log rows.

The rows of a range are the same whoever reads it and whenever: positions come from the bytes,
`read_timestamp` from the offset the range was planned for. A range that starts at a split point
begins with the first block after the next sync marker; a block belongs to the range it starts in.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import structlog

from observers.changes import CHANGES_SCHEMA, arrow_changes
from observers.origin import Origin
from processor.changefeed.decoding.avro_chunk import SYNC_SIZE, ChunkHeader, scan_blocks
from processor.changefeed.decoding.columnar import decode_window, record_json
from processor.changefeed.errors import MissingChunkError, TruncatedBlockError
from processor.changefeed.position import positions_column
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.changefeed.storage.layout import DEFAULT_READ_SIZE, shard_name
from processor.streaming.block_index import read_header
from processor.streaming.feed_view import DataLoss
from processor.streaming.planning import ChunkRange

log = structlog.get_logger("cfp.stream")


@dataclass(frozen=True, slots=True)
class RangeReading:
    """How the rows of every range of one micro-batch are made."""

    events: EventFilter
    stream_name: str
    read_at: datetime
    fail_on_data_loss: bool
    read_bytes: int = DEFAULT_READ_SIZE


async def read_range(
    storage: FeedStorage, r: ChunkRange, how: RangeReading
) -> AsyncGenerator[pa.Table, None]:
    """The change log rows of `r`, a table per window of blocks. Errors: `FeedCorrupt`
    subclasses naming chunk and byte offset; `DataLoss` when the chunk is gone (unless
    `fail_on_data_loss` is off: then nothing, and a warning)."""
    try:
        found = [b for b in await storage.list_blobs(r.chunk) if b.name == r.chunk]
        if not found:
            raise MissingChunkError(r.chunk, "not found")
        size = found[0].size
        header = await read_header(storage, r.chunk, size)
    except MissingChunkError as e:
        if how.fail_on_data_loss:
            raise DataLoss(f"chunk {r.chunk} is gone ({e.problem})") from None
        log.warning("stream.data_lost", what=f"chunk {r.chunk} is gone", chunk=r.chunk)
        return
    end = size if r.end is None else min(r.end, size)
    at = max(r.start, header.size)
    if r.split:
        found_at = await _first_block_after(
            storage, r.chunk, header=header, split=r.start, end=end, size=size, how=how
        )
        if found_at is None:
            return
        at = found_at
    length = how.read_bytes
    while at < end:
        buf = await storage.read_range(r.chunk, at, min(length, size - at))
        scan = scan_blocks(buf, base=at, sync=header.sync, chunk=r.chunk)
        blocks = [b for b in scan.blocks if b.offset < end]
        if not blocks:
            if scan.error is not None:
                raise scan.error
            if scan.is_torn and at + len(buf) < size:
                length *= 2  # a block larger than the read
                continue
            if scan.is_torn:
                raise TruncatedBlockError(
                    r.chunk, at, f"the chunk ends inside a block ({size} bytes)"
                )
            return
        length = how.read_bytes
        decoded = decode_window(buf, base=at, blocks=blocks, header=header, chunk=r.chunk)
        rows = _rows(r, decoded.table, decoded.rows(0, decoded.table.num_rows), how)
        if rows.num_rows:
            yield rows
        if decoded.error is not None:
            raise decoded.error
        at = blocks[-1].end
        if len(blocks) < len(scan.blocks):
            return  # the next block starts at or after the range's end
        if scan.error is not None:
            raise scan.error


def _rows(
    r: ChunkRange,
    records: pa.Table,
    where: tuple[np.ndarray, np.ndarray],
    how: RangeReading,
) -> pa.Table:
    offsets, indexes = where
    keep = how.events.rows(records)
    chosen = np.ones(records.num_rows, bool) if keep is None else keep
    if r.skip and not r.split:  # a start inside a block: its first records were read before
        chosen &= ~((offsets <= r.start + SYNC_SIZE) & (indexes < r.skip))
    if not chosen.any():
        return CHANGES_SCHEMA.empty_table()
    if not chosen.all():
        records = records.filter(pa.array(chosen))
        offsets, indexes = offsets[chosen], indexes[chosen]
    positions = positions_column(r.segment, r.chunk, offsets, indexes)
    return arrow_changes(
        records,
        positions,
        record_json(records),
        Origin(shard_name(r.prefix), r.segment, how.stream_name, how.read_at),
    )


async def _first_block_after(
    storage: FeedStorage,
    chunk: str,
    *,
    header: ChunkHeader,
    split: int,
    end: int,
    size: int,
    how: RangeReading,
) -> int | None:
    """The offset of the first block that starts at or after `split` (before `end`): the byte
    after the first sync marker that ends at or after it. None: no block starts in the range."""
    at = split - SYNC_SIZE
    length = min(how.read_bytes, end - at)
    while at + SYNC_SIZE <= end:
        buf = await storage.read_range(chunk, at, min(length, size - at))
        found = buf.find(header.sync)
        if found >= 0:
            start = at + found + SYNC_SIZE
            return start if start < end else None
        if at + len(buf) >= end:
            return None
        at += len(buf) - SYNC_SIZE + 1  # a marker may straddle two reads
    return None
