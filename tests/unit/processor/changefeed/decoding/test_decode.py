"""Decoding records: recorded chunks to their expected records, damaged blocks, future schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
from processor.changefeed.decoding.decode import RawRecord, decode_blocks
from processor.changefeed.errors import UndecodableBlockError
from processor.emulator.avro_encoding import (
    RecordEncoder,
    encode_block,
    encode_header,
    encode_long_padded,
)
from processor.emulator.schemas import writer_schema
from tests.fixtures import RECORDED, RECORDED_CHUNKS, as_expected_line, expected_records

SYNC = b"\x01" * 16


def decode_file(data: bytes, chunk: str = "c", skip: int = 0) -> tuple[list[RawRecord], object]:
    header = parse_header(data, chunk=chunk)
    scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=chunk)
    d = decode_blocks(
        data[header.size :],
        base=header.size,
        blocks=scan.blocks,
        skip=skip,
        header=header,
        chunk=chunk,
    )
    return d.records, d


@pytest.mark.parametrize("path", RECORDED_CHUNKS, ids=lambda p: str(p.relative_to(RECORDED)))
def test_recorded_chunks_decode_to_exactly_the_expected_records(path: Path) -> None:
    records, _ = decode_file(path.read_bytes(), str(path))
    assert [as_expected_line(r) for r in records] == expected_records(path)


def test_skip_drops_the_already_delivered_records_of_the_first_block() -> None:
    path = RECORDED / "python-recording-2020/log/00/2020/08/12/0000/00000.avro"
    everything, _ = decode_file(path.read_bytes())
    rest, _ = decode_file(path.read_bytes(), skip=40)
    assert rest == everything[40:]


def _chunk(schema: dict, records: list[dict]) -> bytes:  # type: ignore[type-arg]
    enc = RecordEncoder(schema)
    return encode_header(schema, SYNC) + encode_block([enc.encode(r) for r in records], SYNC)


SIMPLE = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}


def test_a_block_whose_records_do_not_fill_it_is_undecodable() -> None:
    enc = RecordEncoder(SIMPLE)
    good = encode_block([enc.encode({"s": "a"})], SYNC)
    body = enc.encode({"s": "b"}) + b"\x00\x00"  # two stray bytes after the only record
    bad = encode_long_padded(1) + encode_long_padded(len(body)) + body + SYNC
    data = encode_header(SIMPLE, SYNC) + good + bad
    records, d = decode_file(data, "log/00/p/00000.avro")
    assert records == [{"s": "a"}]
    err = d.error  # type: ignore[attr-defined]
    assert isinstance(err, UndecodableBlockError)
    assert err.chunk == "log/00/p/00000.avro"
    assert err.offset == len(encode_header(SIMPLE, SYNC)) + len(good)


def test_garbage_inside_a_well_framed_block_is_undecodable() -> None:
    body = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  # a string length that overruns
    data = (
        encode_header(SIMPLE, SYNC)
        + encode_long_padded(1)
        + encode_long_padded(len(body))
        + body
        + SYNC
    )
    records, d = decode_file(data)
    assert records == []
    err = d.error  # type: ignore[attr-defined]
    assert isinstance(err, UndecodableBlockError)
    # what is wrong with the bytes, not only which exception the decoder raised
    assert err.problem.startswith(f"undecodable block (1 record in {len(body)} bytes): record 0")
    assert "does not decode with the chunk's writer schema" in err.problem


def test_unknown_fields_and_enum_symbols_decode_with_the_writer_schema() -> None:
    schema = writer_schema(6)
    event_type = schema["fields"][3]["type"]
    event_type["symbols"].append("BlobFromTheFuture")
    data_fields = schema["fields"][-1]["type"]["fields"]
    data_fields.insert(3, {"name": "futureField", "type": ["null", "string"], "default": None})
    record = {
        "schemaVersion": 9,
        "topic": "t",
        "subject": "/blobServices/default/containers/c/blobs/b",
        "eventType": "BlobFromTheFuture",
        "eventTime": "2026-01-01T00:00:00.0000000Z",
        "id": "i",
        "data": {
            "api": "AppendBlock",
            "futureField": "hello",
            "blobTier": "Cold",
            "contentOffset": 12,
            "storageDiagnostics": {},
        },
    }
    records, d = decode_file(_chunk(schema, [record]))
    assert d.error is None  # type: ignore[attr-defined]
    (out,) = records
    assert out["eventType"] == "BlobFromTheFuture"
    data = out["data"]
    assert isinstance(data, dict)
    assert data["futureField"] == "hello" and data["blobTier"] == "Cold"
