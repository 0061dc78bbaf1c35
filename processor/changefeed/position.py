"""Positions in the feed: per shard, per batch, and the continuation token of a whole-feed read.

A shard position is `(chunk, block_offset, event_index)`: the next event to deliver is event
number `event_index` of the block that starts at `block_offset` in `chunk`. After the last event
of a block the position moves to the next block's start with index 0, so a position never points
into a block that has been fully delivered. `chunk = None` means "nothing read yet".
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from processor.changefeed.decoding.avro_chunk import BlockSpan
from processor.changefeed.errors import InvalidContinuation

if TYPE_CHECKING:  # loaded with the first batch, not by `cfp --help`
    import numpy as np
    import pyarrow as pa

    from processor.changefeed.decoding.decode import RawRecord

TOKEN_VERSION = 1


@dataclass(frozen=True, slots=True)
class ShardPosition:
    chunk: str | None = None
    block_offset: int = 0
    event_index: int = 0

    def to_json(self) -> dict[str, object]:
        return {"chunk": self.chunk, "offset": self.block_offset, "index": self.event_index}

    @classmethod
    def from_json(cls, doc: object) -> ShardPosition:
        if not isinstance(doc, dict):
            raise InvalidContinuation(f"shard position is not an object: {doc!r}")
        chunk, offset, index = doc.get("chunk"), doc.get("offset"), doc.get("index")
        if chunk is not None and not isinstance(chunk, str):
            raise InvalidContinuation(f"shard position chunk is not a string: {chunk!r}")
        if not isinstance(offset, int) or not isinstance(index, int) or offset < 0 or index < 0:
            raise InvalidContinuation(f"shard position offset/index invalid: {doc!r}")
        return cls(chunk, offset, index)


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
    lines_of_rows: Callable[[int], memoryview] | None = None

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
        from processor.changefeed.decoding.columnar import record_json  # noqa: PLC0415 - a cycle

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


def positions_column(
    segment: str, chunk: str, offsets: np.ndarray, indexes: np.ndarray
) -> pa.Array:
    """`event_position` of the records of `chunk` at these block offsets and indexes, as a
    string column (Arrow compute)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    text = pa.string()  # every scalar typed: pyarrow imports pandas to infer an untyped one
    head = pa.scalar(_position_head(segment, chunk), text)
    digits = [
        pc.utf8_lpad(pc.cast(pa.array(column, pa.int64()), text), width, "0")
        for column, width in ((offsets, 12), (indexes, 6))
    ]
    return pc.binary_join_element_wise(head, *digits, pa.scalar(".", text))


def event_position(segment: str, pos: ShardPosition) -> str:
    """An event's `position` (`ChangeEvent.position`, the change log's `position` column): a
    string that sorts like the events of one shard across segments: segment begin time, chunk
    number, block offset, index in the block (`202601010100.00003.000000048211.000007`).

    The same event always has the same position, whoever reads it; a lease's events have
    strictly increasing positions. Sinks recognise by it what they already wrote."""
    if pos.chunk is None:
        raise ValueError("no event at an unread position")
    return f"{_position_head(segment, pos.chunk)}.{pos.block_offset:012d}.{pos.event_index:06d}"


def _position_head(segment: str, chunk: str) -> str:
    """What the positions of one chunk's events begin with: segment time and chunk number."""
    when = segment.removeprefix("idx/segments/").removesuffix("/meta.json").replace("/", "")
    return f"{when}.{chunk.rsplit('/', 1)[-1].removesuffix('.avro')}"


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """Where a whole-feed read stands: the segment being read (or last finished) and its shards.

    `segment = None` means the beginning of the feed. Once every shard of `segment` is finished,
    `is_segment_done` is set and reading resumes with the next segment after it.
    """

    segment: str | None = None
    is_segment_done: bool = False
    shards: Mapping[str, ShardPosition] = field(default_factory=dict)

    def with_shard(self, shard: str, pos: ShardPosition) -> FeedPosition:
        return FeedPosition(self.segment, self.is_segment_done, {**self.shards, shard: pos})

    def to_token(self, *, account: str) -> str:
        doc = {
            "version": TOKEN_VERSION,
            "account": account,
            "segment": self.segment,
            "segmentDone": self.is_segment_done,
            "shards": {k: v.to_json() for k, v in sorted(self.shards.items())},
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_token(cls, token: str, *, account: str) -> FeedPosition:
        """Parse a token written by `to_token`.

        Raises:
            InvalidContinuation: not our JSON, another version, or another storage account.
        """
        try:
            doc = json.loads(token)
        except ValueError as e:
            raise InvalidContinuation(f"continuation is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != TOKEN_VERSION:
            raise InvalidContinuation("continuation is not a cfp token of version 1")
        if doc.get("account") != account:
            raise InvalidContinuation(
                f"continuation belongs to account {doc.get('account')!r}, not {account!r}"
            )
        segment = doc.get("segment")
        shards = doc.get("shards", {})
        if segment is not None and not isinstance(segment, str):
            raise InvalidContinuation("continuation segment is not a string")
        if not isinstance(shards, dict):
            raise InvalidContinuation("continuation shards is not an object")
        return cls(
            segment=segment,
            is_segment_done=bool(doc.get("segmentDone", False)),
            shards={str(k): ShardPosition.from_json(v) for k, v in shards.items()},
        )
