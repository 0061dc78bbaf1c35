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
from contextlib import AbstractContextManager, contextmanager
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


class BlockDecoder:
    """Decodes records of the blocks held in one fetched byte range, any slice of a block at a time.

    Slices let a reader hand out small batches even from blocks of thousands of records: the
    records of a small batch are printed and freed while their memory is still in the cache.
    """

    def __init__(self, buf: bytes, *, base: int, header: ChunkHeader, chunk: str) -> None:
        self._stream = io.BytesIO(buf)
        self._base = base
        self._schema = parsed_schema(header)
        self._chunk = chunk

    def decode(
        self, block: BlockSpan, *, first: int, stop: int, cursor: int | None
    ) -> tuple[list[RawRecord], int]:
        """Records `first` to `stop - 1` of `block`, and the file offset after the last one.

        `cursor` is the file offset of record `first` when known (a slice continuing the last
        one); when None the block is decoded from its start and the first records dropped.

        Raises:
            UndecodableBlockError: the records do not decode, or (when the slice ends the
                block) do not use exactly the block's bytes.
        """
        reader = fastavro.schemaless_reader
        stream, schema = self._stream, self._schema
        stream.seek((block.data_start if cursor is None else cursor) - self._base)
        index = 0 if cursor is None else first  # of the record being decoded, in the block
        records: list[Any] = []
        try:
            while index < first:
                reader(stream, schema, None)
                index += 1
            while index < stop:
                records.append(reader(stream, schema, None))
                index += 1
        except Exception as e:  # fastavro raises many kinds on bad bytes
            raise UndecodableBlockError(
                self._chunk,
                block.offset,
                f"undecodable block ({block.count} record{'' if block.count == 1 else 's'} in "
                f"{block.data_end - block.data_start} bytes): record {index} does not decode "
                f"with the chunk's writer schema: its bytes are damaged or not Avro "
                f"(decoder: {type(e).__name__})",
            ) from None
        after = stream.tell() + self._base
        if stop == block.count and after != block.data_end:
            raise UndecodableBlockError(
                self._chunk,
                block.offset,
                f"undecodable block: its records use {after - block.data_start} bytes, it holds "
                f"{block.data_end - block.data_start}",
            )
        if after > block.data_end:
            raise UndecodableBlockError(
                self._chunk, block.offset, "undecodable block: its records overrun it"
            )
        return records, after


def gc_paused() -> AbstractContextManager[None]:
    """See `_gc_paused`: the decode loops run with the cyclic collector paused."""
    return _gc_paused()


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
    decoder = BlockDecoder(buf, base=base, header=header, chunk=chunk)
    records: list[RawRecord] = []
    with _gc_paused():
        for i, block in enumerate(blocks):
            try:
                got, _ = decoder.decode(
                    block, first=skip if i == 0 else 0, stop=block.count, cursor=None
                )
            except UndecodableBlockError as e:
                return Decoded(records, tuple(blocks[:i]), e)
            records.extend(got)
    return Decoded(records, tuple(blocks), None)
