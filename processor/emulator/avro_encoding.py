"""Writing chunk files byte for byte as the service does: header first, then whole blocks.

Block counts and sizes are zigzag varints padded to 10 bytes (the service's habit, seen in every
recorded chunk); header map counts and string lengths are minimal varints. Codec is `null`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro

MAGIC = b"Obj\x01"


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def encode_long(n: int) -> bytes:
    """Minimal zigzag varint."""
    z = zigzag(n)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_long_padded(n: int) -> bytes:
    """Zigzag varint padded to exactly 10 bytes."""
    z = zigzag(n)
    return bytes(((z >> (7 * i)) & 0x7F) | 0x80 for i in range(9)) + bytes([(z >> 63) & 0x7F])


def _encode_bytes(b: bytes) -> bytes:
    return encode_long(len(b)) + b


def encode_header(schema: dict[str, Any], sync: bytes) -> bytes:
    meta = {
        b"avro.codec": b"null",
        b"avro.schema": json.dumps(schema, separators=(",", ":")).encode(),
    }
    out = bytearray(MAGIC)
    out += encode_long(len(meta))
    for key, value in meta.items():
        out += _encode_bytes(key) + _encode_bytes(value)
    out += encode_long(0)
    out += sync
    return bytes(out)


def encode_block(records: Sequence[bytes], sync: bytes) -> bytes:
    data = b"".join(records)
    return encode_long_padded(len(records)) + encode_long_padded(len(data)) + data + sync


class RecordEncoder:
    """Serialises records with one writer schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._parsed = fastavro.parse_schema(schema, named_schemas={})

    def encode(self, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._parsed, record)
        return buf.getvalue()
