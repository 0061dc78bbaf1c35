"""Moving a stopped lease by hand: where "past the bad block / chunk / segment" lands.

The decisions are pure functions of what was read (a chunk's bytes from the lease's offset, a
shard's chunk listing); `plan_move` does the reading. A move never goes backwards and never lands
inside a block: past a block means just after the next intact sync marker, so records after the
bad spot are read again from a block boundary, and nothing is skipped that the operator did not
ask to skip.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

from processor.changefeed.decoding.avro_chunk import SYNC_SIZE, NeedMoreBytes, parse_header
from processor.changefeed.errors import ChunkError, FeedError
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.layout import chunk_shard_prefix
from processor.reading.lease_position import LeasePosition

if TYPE_CHECKING:
    from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage

HEADER_READ = 64 * 1024


class Past(enum.Enum):
    BLOCK = "block"
    CHUNK = "chunk"
    SEGMENT = "segment"


class MoveError(FeedError):
    """The move asked for does not fit the lease's position (nothing to move past)."""


def past_segment(pos: LeasePosition) -> LeasePosition:
    if pos.segment is None:
        raise MoveError("the lease has not entered a segment yet: nothing to move past")
    return pos.moved_to(pos.segment, True)


def past_chunk(pos: LeasePosition, chunks: list[BlobInfo]) -> LeasePosition:
    """The start of the shard's next chunk; the end of the segment's shard when there is none."""
    chunk = pos.shard.chunk
    if pos.segment is None or pos.is_segment_done or chunk is None:
        raise MoveError("the lease is not inside a chunk: move past its segment instead")
    later = sorted(c.name for c in chunks if c.name > chunk)
    if later:
        return dataclasses.replace(pos, shard=ShardPosition(later[0], 0, 0))
    return past_segment(pos)


def next_block_offset(data: bytes, *, base: int, sync: bytes) -> int | None:
    """The offset just after the first sync marker in `data` (which starts at chunk offset
    `base`, the bad block's start), or None when there is none: the block runs to the end."""
    at = data.find(sync, 1)
    return None if at < 0 else base + at + SYNC_SIZE


def past_block(pos: LeasePosition, after: int | None, chunks: list[BlobInfo]) -> LeasePosition:
    """Just after the bad block at `pos` (`after` from `next_block_offset`); past the chunk
    when the block runs to its end."""
    if after is None:
        return past_chunk(pos, chunks)
    if after <= pos.shard.block_offset:
        raise MoveError(f"block boundary {after} is not after the position {pos.to_json()}")
    return dataclasses.replace(pos, shard=ShardPosition(pos.shard.chunk, after, 0))


async def plan_move(storage: FeedStorage, pos: LeasePosition, past: Past) -> LeasePosition:
    """Where `pos` moves to. Errors: `MoveError`, `FeedError` (storage, an unreadable header:
    then only the whole chunk can be skipped)."""
    if past is Past.SEGMENT:
        return past_segment(pos)
    chunk = pos.shard.chunk
    if pos.segment is None or pos.is_segment_done or chunk is None:
        raise MoveError("the lease is not inside a chunk: move past its segment instead")
    chunks = await storage.list_blobs(chunk_shard_prefix(chunk))
    if past is Past.CHUNK:
        return past_chunk(pos, chunks)
    info = next((c for c in chunks if c.name == chunk), None)
    if info is None:
        raise MoveError(f"{chunk} is gone: move past the chunk instead")
    head = await storage.read_range(chunk, 0, min(info.size, HEADER_READ))
    try:
        header = parse_header(head, chunk=chunk)
    except NeedMoreBytes:
        raise MoveError(f"{chunk}: header not readable: move past the chunk instead") from None
    except ChunkError as e:
        raise MoveError(f"{e}: move past the chunk instead") from None
    start = max(pos.shard.block_offset, header.size)
    data = await storage.read_range(chunk, start, info.size - start) if start < info.size else b""
    return past_block(pos, next_block_offset(data, base=start, sync=header.sync), chunks)
