"""Decoding the records of complete blocks with each chunk's own writer schema, with fastavro:
the fallback of the columnar decoder (`columnar.py`), which names a damaged block.

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

from processor.changefeed.decoding.avro_chunk import BlockSpan, ChunkHeader
from processor.changefeed.errors import UndecodableBlockError

RawRecord = dict[str, object]
"""A change feed record exactly as fastavro decodes it with the chunk's writer schema."""


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
    """Decode whole `blocks` (file offsets) from `buf` (file bytes from offset `base`).

    The first `skip` records of the first block are decoded and dropped (they were delivered
    before). Decoding stops at the first block whose records do not decode or do not fill the
    block exactly; the blocks before it are returned with the error.
    """
    stream = io.BytesIO(buf)
    schema = parsed_schema(header)
    records: list[RawRecord] = []
    with _gc_paused():
        for i, block in enumerate(blocks):
            try:
                got = _block_records(stream, schema, block, base=base, chunk=chunk)
            except UndecodableBlockError as e:
                return Decoded(records, tuple(blocks[:i]), e)
            records.extend(got[skip:] if i == 0 else got)
    return Decoded(records, tuple(blocks), None)


def _block_records(
    stream: io.BytesIO, schema: Any, block: BlockSpan, *, base: int, chunk: str
) -> list[RawRecord]:
    """Every record of `block`, which must use exactly the block's bytes.

    Raises:
        UndecodableBlockError: a record does not decode, or they do not fill the block.
    """
    reader = fastavro.schemaless_reader
    stream.seek(block.data_start - base)
    records: list[Any] = []
    try:
        for _ in range(block.count):
            records.append(reader(stream, schema, None))
    except Exception as e:  # fastavro raises many kinds on bad bytes
        raise UndecodableBlockError(
            chunk,
            block.offset,
            f"undecodable block ({block.count} record{'' if block.count == 1 else 's'} in "
            f"{block.data_end - block.data_start} bytes): record {len(records)} does not "
            f"decode with the chunk's writer schema: its bytes are damaged or not Avro "
            f"(decoder: {type(e).__name__})",
        ) from None
    used = stream.tell() + base - block.data_start
    if used != block.data_end - block.data_start:
        raise UndecodableBlockError(
            chunk,
            block.offset,
            f"undecodable block: its records use {used} bytes, it holds "
            f"{block.data_end - block.data_start}",
        )
    return records
