"""Positions in the feed: per shard, per event, and the continuation token of a whole-feed read.

A shard position is `(chunk, block_offset, event_index)`: the next event to deliver is event
number `event_index` of the block that starts at `block_offset` in `chunk`. After the last event
of a block the position moves to the next block's start with index 0, so a position never points
into a block that has been fully delivered. `chunk = None` means "nothing read yet".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from processor.changefeed.errors import InvalidContinuation

if TYPE_CHECKING:  # loaded with the first batch, not by `cfp --help`
    import numpy as np
    import pyarrow as pa


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
