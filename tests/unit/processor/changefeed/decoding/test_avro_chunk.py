"""Header parsing and block scanning: real recorded bytes, hand-made damage, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.decoding.avro_chunk import (
    NeedMoreBytes,
    header_or_truncated,
    parse_header,
    read_long,
    scan_blocks,
)
from processor.changefeed.errors import (
    BadHeaderError,
    BadMagicError,
    BadSyncMarkerError,
    TruncatedHeaderError,
)
from processor.emulator.avro_encoding import (
    RecordEncoder,
    encode_block,
    encode_header,
    encode_long,
    encode_long_padded,
)
from processor.emulator.schemas import writer_schema
from tests.fixtures import RECORDED, RECORDED_CHUNKS, SERVICE_SYNC

CHUNK_2020 = RECORDED / "python-recording-2020/log/00/2020/08/12/0000/00000.avro"
CHUNK_2022 = RECORDED / "python-recording-2022/log/02/2022/11/28/2100/00000.avro"
SIMPLE_SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}


def make_chunk(block_sizes: list[int], sync: bytes = b"S" * 16) -> bytes:
    enc = RecordEncoder(SIMPLE_SCHEMA)
    out = encode_header(SIMPLE_SCHEMA, sync)
    n = 0
    for size in block_sizes:
        out += encode_block([enc.encode({"n": n + i}) for i in range(size)], sync)
        n += size
    return out


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varints_round_trip_minimal_and_padded(n: int) -> None:
    for encoded in (encode_long(n), encode_long_padded(n)):
        assert read_long(encoded, 0) == (n, len(encoded))
    assert len(encode_long_padded(n)) == 10


def test_padded_varint_matches_the_service_bytes() -> None:
    assert encode_long_padded(7) == bytes.fromhex("8e80808080808080 8000".replace(" ", ""))


def test_varint_cut_short_asks_for_more() -> None:
    with pytest.raises(NeedMoreBytes):
        read_long(encode_long_padded(300)[:5], 0)


@pytest.mark.parametrize("path", RECORDED_CHUNKS, ids=lambda p: str(p.relative_to(RECORDED)))
def test_recorded_headers_parse(path) -> None:  # type: ignore[no-untyped-def]
    data = path.read_bytes()
    header = parse_header(data, chunk=str(path))
    assert header.sync == SERVICE_SYNC
    assert header.codec == "null"
    assert header.schema["name"] == "BlobChangeEvent"
    scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c")
    assert not scan.is_torn and scan.end == len(data)


def test_recorded_block_layout() -> None:
    data = CHUNK_2020.read_bytes()
    header = parse_header(data, chunk="c")
    assert header.size == 2434
    scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c")
    assert [b.count for b in scan.blocks] == [107, 9, 5, 13, 1, 1]
    data = CHUNK_2022.read_bytes()
    header = parse_header(data, chunk="c")
    assert header.size == 2712
    scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c")
    assert [b.count for b in scan.blocks] == [8, 2, 1]
    assert scan.blocks[0].offset == 2712


def test_bad_magic_names_chunk_and_offset() -> None:
    data = b"Obj\x02" + CHUNK_2022.read_bytes()[4:]
    with pytest.raises(BadMagicError) as e:
        parse_header(data, chunk="log/00/x/00000.avro")
    assert e.value.chunk == "log/00/x/00000.avro" and e.value.offset == 0


def test_truncated_header_is_an_error_only_when_the_blob_is_that_short() -> None:
    data = CHUNK_2022.read_bytes()[:1000]
    with pytest.raises(NeedMoreBytes):
        header_or_truncated(data, chunk="c", blob_size=9900)
    with pytest.raises(TruncatedHeaderError) as e:
        header_or_truncated(data, chunk="c", blob_size=1000)
    assert e.value.offset == 1000 and "c" in str(e.value)


def test_non_null_codec_is_refused() -> None:
    data = CHUNK_2022.read_bytes().replace(b"\x08null", b"\x08nulx", 1)
    with pytest.raises(BadHeaderError, match="codec"):
        parse_header(data, chunk="c")


def test_bad_sync_marker_names_the_offset() -> None:
    data = bytearray(make_chunk([3, 2]))
    header = parse_header(bytes(data), chunk="c")
    first = scan_blocks(bytes(data[header.size :]), base=header.size, sync=header.sync, chunk="c")
    bad_at = first.blocks[0].data_end
    data[bad_at] ^= 0xFF
    with pytest.raises(BadSyncMarkerError) as e:
        scan_blocks(bytes(data[header.size :]), base=header.size, sync=header.sync, chunk="c")
    assert e.value.offset == bad_at


def test_bad_framing_after_good_blocks_keeps_the_good_ones() -> None:
    data = bytearray(make_chunk([3, 2, 4]))
    header = parse_header(bytes(data), chunk="c")
    good = scan_blocks(bytes(data[header.size :]), base=header.size, sync=header.sync, chunk="c")
    bad_at = good.blocks[1].data_end
    data[bad_at] ^= 0xFF
    scan = scan_blocks(bytes(data[header.size :]), base=header.size, sync=header.sync, chunk="c")
    assert scan.blocks == good.blocks[:1]
    assert scan.error is not None and scan.error.offset == bad_at
    assert scan.end == good.blocks[1].offset


@given(
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6),
    st.data(),
)
def test_a_cut_anywhere_yields_exactly_the_complete_blocks(sizes: list[int], data) -> None:  # type: ignore[no-untyped-def]
    chunk = make_chunk(sizes)
    header = parse_header(chunk, chunk="c")
    whole = scan_blocks(chunk[header.size :], base=header.size, sync=header.sync, chunk="c")
    cut = data.draw(st.integers(min_value=header.size, max_value=len(chunk)))
    scan = scan_blocks(chunk[header.size : cut], base=header.size, sync=header.sync, chunk="c")
    complete = [b for b in whole.blocks if b.end <= cut]
    assert list(scan.blocks) == complete
    assert scan.end == (complete[-1].end if complete else header.size)
    assert scan.is_torn == (cut != scan.end)


def test_an_offset_at_a_sync_marker_is_accepted() -> None:
    chunk = make_chunk([2, 3, 4])
    header = parse_header(chunk, chunk="c")
    blocks = scan_blocks(chunk[header.size :], base=header.size, sync=header.sync, chunk="c").blocks
    at_sync = blocks[0].end - 16  # the Python SDK saves offsets like this
    scan = scan_blocks(chunk[at_sync:], base=at_sync, sync=header.sync, chunk="c")
    assert scan.blocks == blocks[1:]
    assert scan.start == blocks[1].offset


def test_emulator_header_round_trips() -> None:
    schema = writer_schema(5)
    header = parse_header(encode_header(schema, SERVICE_SYNC), chunk="c")
    assert header.schema == schema and header.sync == SERVICE_SYNC
