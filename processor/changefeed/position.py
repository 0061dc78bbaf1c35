"""Positions in the feed: per shard, per batch, and the continuation token of a whole-feed read.

A shard position is `(chunk, block_offset, event_index)`: the next event to deliver is event
number `event_index` of the block that starts at `block_offset` in `chunk`. After the last event
of a block the position moves to the next block's start with index 0, so a position never points
into a block that has been fully delivered. `chunk = None` means "nothing read yet".
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from processor.changefeed.avro_chunk import BlockSpan
from processor.changefeed.errors import InvalidContinuation

TOKEN_VERSION = 1

RawRecord = dict[str, object]
"""A change feed record exactly as fastavro decodes it with the chunk's writer schema."""


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

    `records` holds only the records that passed the reader's filters; `raw_index[k]` is the
    index of `records[k]` among all records of the batch, so a position can be taken after any
    delivered record even when filtered-out records sit in between.
    """

    segment: str
    shard: str
    chunk: str
    start: ShardPosition
    end: ShardPosition
    blocks: tuple[BlockSpan, ...]
    records: list[RawRecord]
    raw_index: list[int]
    raw_count: int  # records read, delivered or filtered out; the last block may be partial
    _first_after: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        # cumulative count of raw records delivered once each block is done
        total = 0
        for i, b in enumerate(self.blocks):
            total += b.count - (self.start.event_index if i == 0 else 0)
            self._first_after.append(total)

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

    def position_after_raw(self, r: int) -> ShardPosition:
        """The shard position just after raw record `r` (0-based within this batch)."""
        j = bisect.bisect_right(self._first_after, r)
        block = self.blocks[j]
        before = self._first_after[j - 1] if j else 0
        skip = self.start.event_index if j == 0 else 0
        index = skip + (r - before) + 1
        if index >= block.count:
            return ShardPosition(self.chunk, block.end, 0)
        return ShardPosition(self.chunk, block.offset, index)

    def position_after(self, k: int) -> ShardPosition:
        """The shard position just after delivered record `k`."""
        return self.position_after_raw(self.raw_index[k])

    def event_positions(self) -> list[str]:
        """`event_position` of every delivered record, in order (built block by block: that of
        record `i` of a block is the block's prefix and `i`)."""
        if self.chunk is None or not self.records:
            return []
        keys: list[str] = []
        for j, block in enumerate(self.blocks):
            head = event_position(self.segment, ShardPosition(self.chunk, block.offset, 0))[:-6]
            first = self.start.event_index if j == 0 else 0
            keys += [f"{head}{i:06d}" for i in range(first, block.count)]
        if self.raw_count == len(self.records):  # nothing filtered out
            return keys[: self.raw_count]
        return [keys[r] for r in self.raw_index]


def event_position(segment: str, pos: ShardPosition) -> str:
    """An event's `position` (`ChangeEvent.position`, the change log's `position` column): a
    string that sorts like the events of one shard across segments: segment begin time, chunk
    number, block offset, index in the block (`202601010100.00003.000000048211.000007`).

    The same event always has the same position, whoever reads it; a lease's events have
    strictly increasing positions. Sinks recognise by it what they already wrote."""
    if pos.chunk is None:
        raise ValueError("no event at an unread position")
    when = segment.removeprefix("idx/segments/").removesuffix("/meta.json").replace("/", "")
    chunk = pos.chunk.rsplit("/", 1)[-1].removesuffix(".avro")
    return f"{when}.{chunk}.{pos.block_offset:012d}.{pos.event_index:06d}"


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
