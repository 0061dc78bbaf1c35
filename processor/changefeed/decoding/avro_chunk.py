"""The Avro object container layout of a chunk file, parsed without trusting any size.

A chunk is `[magic][metadata map][sync]` followed by blocks `[count][size][records][sync]`. The
service pads `count` and `size` to 10-byte varints; nothing here assumes either the padding or
its absence. These functions work on an in-memory byte range that starts at a known file offset,
so every error can name the exact byte offset inside the chunk.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from processor.changefeed.errors import (
    BadHeaderError,
    BadMagicError,
    BadSyncMarkerError,
    TruncatedHeaderError,
)

HEADER_PROBE = 4096  # bytes first read for a chunk header: enough unless the schema is large

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
MAX_VARINT_BYTES = 10
# A block larger than this is taken as a corrupt size field rather than waited for.
MAX_BLOCK_BYTES = 1 << 30


class NeedMoreBytes(Exception):
    """The buffer ends before the structure being parsed; fetch at least `needed` bytes."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def read_long(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode one zigzag varint at `pos`; return (value, next position).

    Raises:
        NeedMoreBytes: the buffer ends inside the varint.
        ValueError: more than 10 bytes carry a continuation bit.
    """
    result = 0
    shift = 0
    end = len(buf)
    for i in range(pos, pos + MAX_VARINT_BYTES):
        if i >= end:
            raise NeedMoreBytes(i + 1)
        b = buf[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), i + 1
        shift += 7
    raise ValueError("varint longer than 10 bytes")


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    """The parsed header: where the first block starts, the sync marker and the writer schema."""

    size: int
    sync: bytes
    codec: str
    schema: dict[str, Any]
    raw: bytes  # the header bytes themselves; decoding re-uses them as a container prefix


def parse_header(buf: bytes, *, chunk: str) -> ChunkHeader:
    """Parse the header at the start of `buf`.

    Raises:
        NeedMoreBytes: `buf` ends inside the header (the caller fetches more and retries, or
            raises `TruncatedHeaderError` when the blob itself is that short).
        BadMagicError / BadHeaderError: the bytes are not an Avro container header we can read.
    """
    if len(buf) < len(MAGIC):
        raise NeedMoreBytes(len(MAGIC))
    if buf[: len(MAGIC)] != MAGIC:
        raise BadMagicError(chunk, 0, f"bad magic {bytes(buf[:4])!r}, expected {MAGIC!r}")
    meta: dict[str, bytes] = {}
    pos = len(MAGIC)
    try:
        while True:
            count, pos = read_long(buf, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(buf, pos)  # byte size of the map block, unused
            for _ in range(count):
                klen, pos = read_long(buf, pos)
                key_end = pos + klen
                if klen < 0:
                    raise BadHeaderError(chunk, pos, "negative metadata key length")
                if key_end > len(buf):
                    raise NeedMoreBytes(key_end)
                key = bytes(buf[pos:key_end]).decode("utf-8", "replace")
                vlen, pos = read_long(buf, key_end)
                if vlen < 0:
                    raise BadHeaderError(chunk, pos, "negative metadata value length")
                if pos + vlen > len(buf):
                    raise NeedMoreBytes(pos + vlen)
                meta[key] = bytes(buf[pos : pos + vlen])
                pos += vlen
    except ValueError as e:
        raise BadHeaderError(chunk, pos, str(e)) from None
    if pos + SYNC_SIZE > len(buf):
        raise NeedMoreBytes(pos + SYNC_SIZE)
    sync = bytes(buf[pos : pos + SYNC_SIZE])
    size = pos + SYNC_SIZE
    codec = meta.get("avro.codec", b"null").decode("ascii", "replace")
    if codec != "null":
        raise BadHeaderError(chunk, 0, f"unsupported codec {codec!r} (the change feed uses null)")
    try:
        schema = json.loads(meta["avro.schema"])
    except KeyError:
        raise BadHeaderError(chunk, 0, "no avro.schema in the header") from None
    except ValueError as e:
        raise BadHeaderError(chunk, 0, f"avro.schema is not JSON ({e})") from None
    if not isinstance(schema, dict):
        raise BadHeaderError(chunk, 0, "avro.schema is not a record schema")
    return ChunkHeader(size=size, sync=sync, codec=codec, schema=schema, raw=bytes(buf[:size]))


def header_or_truncated(buf: bytes, *, chunk: str, blob_size: int) -> ChunkHeader:
    """`parse_header`, turning "need more" into `TruncatedHeaderError` when the blob is complete."""
    try:
        return parse_header(buf, chunk=chunk)
    except NeedMoreBytes as e:
        if len(buf) >= blob_size:
            raise TruncatedHeaderError(
                chunk, len(buf), f"blob is {blob_size} bytes, header needs at least {e.needed}"
            ) from None
        raise


async def read_header(
    read: Callable[[int], Awaitable[bytes]], *, chunk: str, blob_size: int
) -> ChunkHeader:
    """The header of a chunk whose first bytes `read(n)` returns (n or more, unless the blob is
    shorter): a probe of `HEADER_PROBE` bytes first, then as many as the header says it needs.
    Errors: `FeedCorrupt` subclasses for a bad header, and whatever `read` raises."""
    want = min(blob_size, HEADER_PROBE)
    while True:
        buf = await read(want)
        try:
            return header_or_truncated(buf, chunk=chunk, blob_size=blob_size)
        except NeedMoreBytes as e:
            want = min(blob_size, max(e.needed, 2 * len(buf)))


@dataclass(frozen=True, slots=True)
class BlockSpan:
    """One complete block: its file offset, record count, and where its records start and end."""

    offset: int
    count: int
    data_start: int
    data_end: int

    @property
    def end(self) -> int:
        """File offset just after this block's sync marker: where the next block starts."""
        return self.data_end + SYNC_SIZE


@dataclass(frozen=True, slots=True)
class BlockScan:
    """The complete blocks found in a byte range, and whether bytes were left over after them."""

    blocks: tuple[BlockSpan, ...]
    start: int  # file offset of the first block (after a skipped sync marker, if any)
    end: int  # file offset after the last complete block
    is_torn: bool  # bytes remain after `end` that do not form a whole block
    error: BadSyncMarkerError | None = None  # bad framing right after `blocks`


def scan_blocks(buf: bytes | memoryview, *, base: int, sync: bytes, chunk: str) -> BlockScan:
    """Find the complete blocks in `buf`, which holds the chunk's bytes from file offset `base`.

    An offset that points at a sync marker (the Python SDK saves those) is accepted: the marker is
    skipped. Bytes after the last complete block are reported as torn, never parsed as data.

    Bad framing (a block not followed by the sync marker, an impossible count or size) after
    some good blocks is returned in `error` with those blocks, so they can still be delivered.

    Raises:
        BadSyncMarkerError: the very first block is badly framed.
    """
    n = len(buf)
    pos = 0
    if n >= SYNC_SIZE and buf[:SYNC_SIZE] == sync:
        pos = SYNC_SIZE
    start = pos
    blocks: list[BlockSpan] = []
    while pos < n:
        block_at = pos
        try:
            count, pos = read_long(buf, pos)
            size, pos = read_long(buf, pos)
        except NeedMoreBytes:
            return BlockScan(tuple(blocks), base + start, base + block_at, is_torn=True)
        except ValueError as e:
            error = BadSyncMarkerError(chunk, base + block_at, f"bad block header: {e}")
            return _stop(blocks, base + start, base + block_at, error)
        if count <= 0 or size < 0 or size > MAX_BLOCK_BYTES:
            error = BadSyncMarkerError(
                chunk, base + block_at, f"impossible block header (count {count}, size {size})"
            )
            return _stop(blocks, base + start, base + block_at, error)
        data_end = pos + size
        if data_end + SYNC_SIZE > n:
            return BlockScan(tuple(blocks), base + start, base + block_at, is_torn=True)
        if buf[data_end : data_end + SYNC_SIZE] != sync:
            error = BadSyncMarkerError(
                chunk,
                base + data_end,
                f"block at {base + block_at} is not followed by the sync marker",
            )
            return _stop(blocks, base + start, base + block_at, error)
        blocks.append(BlockSpan(base + block_at, count, base + pos, base + data_end))
        pos = data_end + SYNC_SIZE
    return BlockScan(tuple(blocks), base + start, base + pos, is_torn=False)


def _stop(blocks: list[BlockSpan], start: int, end: int, error: BadSyncMarkerError) -> BlockScan:
    if not blocks:
        raise error
    return BlockScan(tuple(blocks), start, end, is_torn=False, error=error)
