"""Decoding the records of complete blocks with each chunk's own writer schema (fastavro).

Records are decoded one at a time with `schemaless_reader`, which costs about as much as
`fastavro.reader` over the whole file but lets us check that every block's records use exactly
the bytes its header announces: a block that decodes to the wrong length is reported as
undecodable instead of silently yielding garbage.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import fastavro

from processor.changefeed.avro_chunk import BlockSpan, ChunkHeader
from processor.changefeed.errors import UndecodableBlockError
from processor.changefeed.position import RawRecord


@lru_cache(maxsize=64)
def _parsed(schema_json: str) -> Any:
    return fastavro.parse_schema(json.loads(schema_json), _write_hint=False, named_schemas={})


def parsed_schema(header: ChunkHeader) -> Any:
    """The fastavro-parsed writer schema of a chunk, cached by its JSON text."""
    return _parsed(json.dumps(header.schema, sort_keys=True))


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
    schema = parsed_schema(header)
    reader = fastavro.schemaless_reader
    stream = io.BytesIO(buf)
    records: list[RawRecord] = []
    for i, block in enumerate(blocks):
        stream.seek(block.data_start - base)
        mark = len(records)
        try:
            for j in range(block.count):
                rec = reader(stream, schema, None)
                if i > 0 or j >= skip:
                    records.append(cast(RawRecord, rec))
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
