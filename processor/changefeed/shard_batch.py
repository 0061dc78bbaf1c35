"""A batch of one shard (`ShardBatch`): records of consecutive blocks of one chunk, cut from a
decoded window, with the positions around them; the change feed layer's form of a batch."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from processor.changefeed.decoding.avro_chunk import BlockSpan
from processor.changefeed.position import ShardPosition, positions_column

if TYPE_CHECKING:  # loaded with the first batch, not by `cfp --help`
    import numpy as np
    import pyarrow as pa

    from processor.changefeed.decoding.decode import RawRecord


# Events per batch a reader hands out (a block of thousands is handed out in slices).
DEFAULT_BATCH_EVENTS = 250


@dataclass(frozen=True, slots=True)
class ShardBatch:
    """Records read from consecutive blocks of one chunk, with the positions around them.

    The batch starts at record `start.event_index` of its first block and may stop inside its
    last block (then `end` points into that block).

    `table` holds the records that passed the reader's filters, one row each, as Arrow columns
    of the chunk's writer schema (a slice of the decoded window, not a copy). Their position
    columns are `offsets` (the file offset of each record's block) and `indexes` (its index in
    the block), so a position can be taken after any delivered record even when filtered-out
    records sit in between. `raw_count` counts the records read, delivered or filtered out.
    """

    segment: str
    shard: str
    chunk: str
    start: ShardPosition
    end: ShardPosition
    blocks: tuple[BlockSpan, ...]
    table: pa.Table
    offsets: np.ndarray  # int64, one per row of `table`
    indexes: np.ndarray  # int64, one per row of `table`
    raw_count: int
    # the JSON of `table`'s records, cut from its window's (made once per window); None: made
    # from `table` when asked
    json_of_rows: Callable[[], pa.Array] | None = None
    # the first N records' JSON lines, a view of its window's (a reader that prints JSON lines
    # and nothing else keeps only those: then `table` has no columns and `json_of_rows` is None)
    lines_of_rows: Callable[[int], bytes | memoryview] | None = None

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def records(self) -> list[RawRecord]:
        """The records as Python dicts, exactly as fastavro decodes them (made on each call:
        for the few consumers that need objects, never on the columnar path)."""
        return self.table.to_pylist(maps_as_pydicts="lossy")  # type: ignore[no-any-return]

    @property
    def read_bytes(self) -> int:
        """Chunk bytes this batch moves past (a block split over two batches counts once)."""
        return max(0, self.end.block_offset - self.start.block_offset)

    @property
    def read_share(self) -> int:
        """This batch's share of the bytes of the blocks it reads records of: a block's size
        split over its records. Smooth where `read_bytes` counts a block once it is passed, so
        a lease read in slices of a large block does not look idle and then hot."""
        share = 0.0
        last = len(self.blocks) - 1
        for j, b in enumerate(self.blocks):
            first = self.start.event_index if j == 0 else 0
            inside = j == last and self.end.block_offset == b.offset
            upto = self.end.event_index if inside else b.count
            share += (b.end - b.offset) * max(0, upto - first) / max(1, b.count)
        return round(share)

    def json(self) -> pa.Array:
        """Each record as JSON text, byte for byte as `orjson` writes fastavro's dicts."""
        if self.json_of_rows is not None:
            return self.json_of_rows()
        from processor.changefeed.decoding.columnar import record_json  # noqa: PLC0415 - loads with a batch

        return record_json(self.table)

    def json_lines(self, count: int) -> bytes | memoryview:
        """The first `count` records as JSON lines (`json()`, a newline after each), in one
        buffer: a view of the window's lines when the reader kept them."""
        if self.lines_of_rows is not None:
            return self.lines_of_rows(count)
        from processor.changefeed.decoding.columnar import arrow_text, json_lines_column  # noqa: PLC0415

        return arrow_text(json_lines_column(self.json().slice(0, count)), 0, count)

    def position_after(self, k: int) -> ShardPosition:
        """The shard position just after delivered record `k`."""
        offset, index = int(self.offsets[k]), int(self.indexes[k]) + 1
        block = self.blocks[bisect.bisect_left(self.blocks, offset, key=lambda b: b.offset)]
        if index >= block.count:
            return ShardPosition(self.chunk, block.end, 0)
        return ShardPosition(self.chunk, offset, index)

    def positions(self) -> pa.Array:
        """`event_position` of every delivered record, as a string column (Arrow compute)."""
        return positions_column(self.segment, self.chunk, self.offsets, self.indexes)
