"""Decoding the records of complete blocks with each chunk's own writer schema (fastavro).

Records are decoded one at a time with `schemaless_reader`, which costs about as much as
`fastavro.reader` over the whole file but lets us check that every block's records use exactly
the bytes its header announces: a block that decodes to the wrong length is reported as
undecodable instead of silently yielding garbage.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import fastavro

from processor.changefeed.avro_chunk import BlockSpan, ChunkHeader
from processor.changefeed.errors import UndecodableBlockError
from processor.changefeed.position import RawRecord


@lru_cache(maxsize=64)
def _parsed(header_bytes: bytes) -> Any:
    # the header bytes hold the schema text; chunks of one segment share them byte for byte
    return fastavro.parse_schema(_schema_of[header_bytes], named_schemas={})


_schema_of: dict[bytes, dict[str, Any]] = {}


def parsed_schema(header: ChunkHeader) -> Any:
    """The fastavro-parsed writer schema of a chunk, cached by its header bytes."""
    if header.raw not in _schema_of:
        if len(_schema_of) > 64:
            _schema_of.clear()
        _schema_of[header.raw] = header.schema
    return _parsed(header.raw)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while decoding.

    Decoding allocates hundreds of thousands of small dicts that stay alive until the batch is
    handed over; each allocation burst triggers collections that rescan them all, which cost a
    third of the decode time in our benchmark. The records hold no reference cycles, so nothing
    is lost by not collecting during the loop; the collector's state is restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class Decoded:
    """Records of the leading good blocks; `error` describes the first bad block, if any."""

    records: list[RawRecord]
    blocks: tuple[BlockSpan, ...]
    error: UndecodableBlockError | None


def decode_blocks(
    buf: bytes,
    *,
    base: int,
    blocks: Sequence[BlockSpan],
    skip: int,
    header: ChunkHeader,
    chunk: str,
) -> Decoded:
    """Decode `blocks` (file offsets) from `buf` (file bytes from offset `base`).

    The first `skip` records of the first block are decoded and dropped (they were delivered
    before). Decoding stops at the first block whose records do not decode or do not fill the
    block exactly; the blocks before it are returned with the error.
    """
    with _gc_paused():
        return _decode(buf, base, blocks, skip=skip, schema=parsed_schema(header), chunk=chunk)


def _decode(
    buf: bytes, base: int, blocks: Sequence[BlockSpan], *, skip: int, schema: Any, chunk: str
) -> Decoded:
    reader = fastavro.schemaless_reader
    stream = io.BytesIO(buf)
    records: list[Any] = []
    for i, block in enumerate(blocks):
        stream.seek(block.data_start - base)
        mark = len(records)
        try:
            for j in range(block.count):
                rec = reader(stream, schema, None)
                if i > 0 or j >= skip:
                    records.append(rec)
            used = stream.tell() + base
        except Exception as e:  # fastavro raises many kinds on bad bytes
            del records[mark:]
            return Decoded(
                records,
                tuple(blocks[:i]),
                UndecodableBlockError(chunk, block.offset, f"{type(e).__name__}: {e}"),
            )
        if used != block.data_end:
            del records[mark:]
            return Decoded(
                records,
                tuple(blocks[:i]),
                UndecodableBlockError(
                    chunk,
                    block.offset,
                    f"records use {used - block.data_start} bytes, the block holds "
                    f"{block.data_end - block.data_start}",
                ),
            )
    return Decoded(records, tuple(blocks), None)
