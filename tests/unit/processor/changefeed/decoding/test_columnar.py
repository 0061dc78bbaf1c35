"""Windows decoded into Arrow columns: exactly what fastavro decodes, field for field and as JSON,
on the recorded chunks and on random records of every schema version the emulator writes; and
what happens when the native decoder fails, miscounts or does not return."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.changefeed.decoding import columnar
from processor.changefeed.decoding.avro_chunk import BlockSpan, parse_header, read_long, scan_blocks
from processor.changefeed.decoding.columnar import (
    DecodedWindow,
    NativeDecoder,
    NativeUnavailable,
    StuckDecode,
    decode_window,
    record_json,
)
from processor.changefeed.decoding.window_lines import Pieces, decode_lines
from processor.changefeed.errors import UndecodableBlockError
from processor.changefeed.windows import Window
from processor.emulator.avro_encoding import (
    RecordEncoder,
    encode_block,
    encode_header,
    encode_long_padded,
)
from processor.emulator.schemas import SUPPORTED_VERSIONS, writer_schema
from tests import patience
from tests.fixtures import RECORDED, RECORDED_CHUNKS, expected_records

SYNC = bytes(range(16))


def window(data: bytes, chunk: str = "c", native: NativeDecoder | None = None) -> DecodedWindow:
    """Every block of a whole chunk as one window."""
    header = parse_header(data, chunk=chunk)
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=chunk)
    return decode_window(
        data,
        base=0,
        blocks=blocks.blocks,
        header=header,
        chunk=chunk,
        native=native or NativeDecoder(min_records=1),
    )


def fastavro_records(data: bytes) -> list[dict[str, Any]]:
    return list(fastavro.reader(io.BytesIO(data)))


@pytest.mark.parametrize("path", RECORDED_CHUNKS, ids=lambda p: str(p.relative_to(RECORDED)))
def test_recorded_chunks_decode_natively_to_exactly_fastavros_records(path: Path) -> None:
    data = path.read_bytes()
    decoded = window(data, str(path))
    assert decoded.native and decoded.error is None
    records = decoded.table.to_pylist(maps_as_pydicts="lossy")
    assert records == fastavro_records(data)
    assert [json.dumps(r, default=str, ensure_ascii=False) for r in records] == (
        expected_records(path)
    )
    # JSON straight from the columns: what orjson writes of fastavro's dicts, byte for byte
    assert record_json(decoded.table).to_pylist() == [
        orjson.dumps(r).decode() for r in fastavro_records(data)
    ]


def _values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of an Avro schema, with every kind of text (control characters, quotes, non-ASCII,
    astral planes), empty and absent maps, and extreme numbers."""
    if isinstance(schema, list):
        return st.one_of([_values(branch, named) for branch in schema])
    if isinstance(schema, str):
        if schema in named:
            return _values(named[schema], named)
        return {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "string": st.text(max_size=8),
        }[schema]
    kind = schema["type"]
    if isinstance(kind, list | dict):
        return _values(kind, named)
    if "name" in schema and kind in ("record", "enum"):
        named[schema["name"]] = schema
    if kind == "record":
        return st.fixed_dictionaries(
            {f["name"]: _values(f["type"], named) for f in schema["fields"]}
        )
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), _values(schema["values"], named), max_size=3)
    if kind == "array":
        return st.lists(_values(schema["items"], named), max_size=3)
    return _values(kind, named)


def chunk_of(schema: dict[str, Any], records: list[dict[str, Any]], sizes: list[int]) -> bytes:
    encoder = RecordEncoder(schema)
    data, at = encode_header(schema, SYNC), 0
    for size in sizes:
        if at < len(records):
            data += encode_block([encoder.encode(r) for r in records[at : at + size]], SYNC)
            at += size
    if at < len(records):
        data += encode_block([encoder.encode(r) for r in records[at:]], SYNC)
    return data


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@settings(max_examples=30)
@given(data=st.data())
def test_any_window_of_any_schema_version_decodes_as_fastavro_decodes_it(
    version: int, data: st.DataObject
) -> None:
    schema = writer_schema(version)
    records = data.draw(st.lists(_values(schema, {}), min_size=1, max_size=40), label="records")
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=12), label="block sizes")
    chunk = chunk_of(schema, records, sizes)
    header = parse_header(chunk, chunk="c")
    blocks = scan_blocks(chunk[header.size :], base=header.size, sync=header.sync, chunk="c").blocks
    first = data.draw(st.integers(0, len(blocks) - 1), label="first block")
    last = data.draw(st.integers(first, len(blocks) - 1), label="last block")
    # the window's bytes as a reader holds them: from the first block on, at a file offset
    base = blocks[first].offset - data.draw(st.integers(0, 3), label="bytes before")
    decoded = decode_window(
        chunk[base:],
        base=base,
        blocks=blocks[first : last + 1],
        header=header,
        chunk="c",
        native=NativeDecoder(min_records=1),
    )
    assert decoded.native and decoded.error is None
    before = sum(b.count for b in blocks[:first])
    wanted = fastavro_records(chunk)[
        before : before + sum(b.count for b in blocks[first : last + 1])
    ]
    assert decoded.table.to_pylist(maps_as_pydicts="lossy") == wanted
    assert record_json(decoded.table).to_pylist() == [orjson.dumps(r).decode() for r in wanted]
    # polars-avro's reader, called directly, gives the very table its `read_avro` gives
    container = header.raw + chunk[blocks[first].offset : blocks[last].end]
    assert_same_as_read_avro(container)
    # each row knows its block and its index there
    offsets, indexes = decoded.rows(0, decoded.table.num_rows)
    walk = [(b.offset, i) for b in blocks[first : last + 1] for i in range(b.count)]
    assert list(zip(offsets.tolist(), indexes.tolist(), strict=True)) == walk


def assert_same_as_read_avro(container: bytes) -> None:
    import polars_avro

    public = polars_avro.read_avro(io.BytesIO(container), batch_size=1 << 24).to_arrow()
    direct = columnar._native_read(container)
    assert direct.schema == public.schema and direct.equals(public)


@pytest.mark.parametrize("path", RECORDED_CHUNKS[:3], ids=lambda p: str(p.relative_to(RECORDED)))
def test_the_reader_called_directly_gives_read_avros_table_headers_alone_too(path: Path) -> None:
    data = path.read_bytes()
    header = parse_header(data, chunk="c")
    assert_same_as_read_avro(data)
    assert_same_as_read_avro(header.raw)
    assert columnar._native_read(header.raw).num_rows == 0


SIMPLE = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    ],
}


def four_blocks() -> tuple[bytes, list[BlockSpan]]:
    data = chunk_of(SIMPLE, [{"s": f"r{i}", "e": "AB"[i % 2]} for i in range(12)], [3, 3, 3, 3])
    header = parse_header(data, chunk="c")
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c").blocks
    return data, list(blocks)


def with_count(data: bytes, block: BlockSpan, count: int) -> bytes:
    """The chunk with `block`'s padded count varint rewritten (its bytes left as they are)."""
    return data[: block.offset] + encode_long_padded(count) + data[block.offset + 10 :]


def damaged(kind: str) -> tuple[bytes, int]:
    """A chunk with its second block damaged in one of the ways the framing cannot see, and
    the offset of that block."""
    data, blocks = four_blocks()
    bad = blocks[1]
    if kind == "count one too high":
        return with_count(data, bad, bad.count + 1), bad.offset
    if kind == "string length too long":
        at = bad.data_start  # the first record's string length: 2 more than its bytes
        length, after = read_long(data, at)
        return data[:at] + bytes([(length + 2) << 1]) + data[after:], bad.offset
    if kind == "enum index out of range":
        at = bad.data_start + 1 + len(b"r3")  # the first record's enum, after its string
        return data[:at] + bytes([9 << 1]) + data[at + 1 :], bad.offset
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["count one too high", "string length too long", "enum index out of range"]
)
def test_a_damaged_block_is_named_by_the_fallback_after_the_good_blocks(kind: str) -> None:
    data, offset = damaged(kind)
    native = NativeDecoder(min_records=1)
    decoded = window(data, "log/00/x/00000.avro", native)
    assert not decoded.native and native.fallbacks == 1
    assert isinstance(decoded.error, UndecodableBlockError)
    assert (decoded.error.chunk, decoded.error.offset) == ("log/00/x/00000.avro", offset)
    assert [b.offset for b in decoded.blocks] == [four_blocks()[1][0].offset]
    assert decoded.table.to_pylist() == [{"s": f"r{i}", "e": "AB"[i % 2]} for i in range(3)]
    assert decoded.table.schema == window(four_blocks()[0]).table.schema  # the native types


def test_a_window_the_native_decoder_miscounts_is_decoded_by_fastavro(monkeypatch: Any) -> None:
    """A decoder that returns a row too few (or too many) is not trusted with the window."""
    read = columnar._native_read

    def one_short(container: bytes) -> pa.Table:
        table = read(container)
        return table.slice(0, max(0, table.num_rows - 1))

    monkeypatch.setattr(columnar, "_native_read", one_short)
    data, _ = four_blocks()
    native = NativeDecoder(min_records=1)
    decoded = window(data, native=native)
    assert not decoded.native and decoded.error is None and native.fallbacks == 1
    assert decoded.table.to_pylist() == fastavro_records(data)


def test_a_header_the_native_decoder_cannot_read_still_decodes(monkeypatch: Any) -> None:
    def refuse(container: bytes) -> pa.Table:
        raise ValueError("no such schema")

    monkeypatch.setattr(columnar, "_native_read", refuse)
    monkeypatch.setattr(columnar, "_schemas", {})
    data, _ = four_blocks()
    decoded = window(data)
    assert not decoded.native and decoded.table.to_pylist() == fastavro_records(data)


def test_a_call_past_its_deadline_is_reported_once_and_the_decoder_not_asked_again() -> None:
    native = NativeDecoder(deadline_s=0.05)
    release = threading.Event()
    seen: list[StuckDecode] = []
    native.on_stuck(seen.append)
    try:
        with pytest.raises(NativeUnavailable):
            native.call(lambda: release.wait(patience.left_s()), chunk="c", offset=7, size=100)
        assert seen == [StuckDecode("c", 7, 100, 0.05)]
        asked: list[int] = []
        with pytest.raises(NativeUnavailable, match="stuck since c"):
            native.call(lambda: asked.append(1), chunk="d", offset=0, size=1)
        assert asked == []  # never called
        late: list[StuckDecode] = []
        native.on_stuck(late.append)  # a listener that comes later hears of it at once
        assert late == seen and len(seen) == 1
        assert "did not return within 0.05 s" in str(seen[0])
    finally:
        release.set()  # the "stuck" call ends: no thread left behind


def test_a_small_window_is_decoded_by_fastavro_into_the_same_columns(monkeypatch: Any) -> None:
    """Below `min_records` a native call (about 5 ms whatever its size) costs more than
    fastavro; the columns are the native decoder's all the same, and no fallback is counted."""
    data, _ = four_blocks()
    calls: list[int] = []
    read = columnar._native_read

    def counted(container: bytes) -> pa.Table:
        calls.append(len(container))
        return read(container)

    native = NativeDecoder(min_records=13)
    columnar._schemas.clear()
    monkeypatch.setattr(columnar, "_native_read", counted)
    small = window(data, native=native)
    assert not small.native and native.fallbacks == 0 and len(calls) == 1  # the header only
    native.min_records = 12
    big = window(data, native=native)
    assert big.native and len(calls) == 2
    assert small.table.equals(big.table)


def test_an_error_of_the_call_is_its_callers() -> None:
    native = NativeDecoder(deadline_s=5)

    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        native.call(fail, chunk="c", offset=0, size=0)
    assert native.stuck is None and native.call(lambda: 42, chunk="c", offset=0, size=0) == 42


SPIN = """
import json, sys
from processor.changefeed.decoding.columnar import NativeDecoder, decode_window
from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
data = sys.stdin.buffer.read()
header = parse_header(data, chunk="c")
blocks = scan_blocks(data[header.size:], base=header.size, sync=header.sync, chunk="c").blocks
native = NativeDecoder(deadline_s=5.0, min_records=1)  # the first call imports polars: room on a busy machine
stuck = []
native.on_stuck(stuck.append)
d = decode_window(data, base=0, blocks=blocks, header=header, chunk="c", native=native)
print(json.dumps({"native": d.native, "rows": d.table.num_rows, "error": d.error.offset,
                  "problem": d.error.problem, "stuck": [s.offset for s in stuck]}))
"""


def test_the_block_that_spins_the_native_decoder_returns_within_the_deadline() -> None:
    """arrow-avro spins for ever on a block whose count is one short of its records. In a
    process of its own: the spinning thread cannot be stopped, it dies with the process."""
    data, blocks = four_blocks()
    spinning = with_count(data, blocks[1], blocks[1].count - 1)
    proc = subprocess.run(
        [sys.executable, "-c", SPIN], input=spinning, capture_output=True, timeout=patience.left_s()
    )
    assert proc.returncode == 0, proc.stderr
    *logged, last = proc.stdout.decode().splitlines()
    out = json.loads(last)
    assert any("decode.stuck" in line and "chunk=c" in line for line in logged)
    assert out == {
        "native": False,
        "rows": 3,  # the first block, decoded by fastavro
        "error": blocks[1].offset,
        "problem": out["problem"],
        "stuck": [blocks[0].offset],
    }
    assert "its records use" in out["problem"] or "does not decode" in out["problem"]


@settings(max_examples=40)
@given(data=st.data())
def test_a_window_hands_out_its_batches_json_lines_kept_whole_or_as_lines_only(
    data: st.DataObject,
) -> None:
    """What `cfp read` prints of each batch (`ShardBatch.json_lines`): orjson's line of every
    record the filter kept, in order, whether the window kept its columns or its lines only
    (then a view of them, cut at any record), made whole or a piece at a time."""
    schema = writer_schema(5)
    records = data.draw(st.lists(_values(schema, {}), min_size=1, max_size=30), label="records")
    sizes = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=8), label="block sizes")
    chunk = chunk_of(schema, records, sizes)
    header = parse_header(chunk, chunk="c")
    scan = scan_blocks(chunk[header.size :], base=header.size, sync=header.sync, chunk="c")
    keep = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    native = NativeDecoder(min_records=data.draw(st.sampled_from([1, 10_000]), label="min"))
    how = data.draw(st.sampled_from(["columns", "lines", "pieces"]), label="how")
    if how == "pieces":  # pieces of any number of blocks, the window's lines a few columns
        piece_bytes = data.draw(st.integers(1, len(chunk)), label="piece bytes")
        verdicts = iter(keep)  # each piece's in turn

        def rows(piece: pa.Table) -> np.ndarray:
            return np.array([next(verdicts) for _ in range(piece.num_rows)], bool)

        decoded = decode_lines(
            chunk, base=0, blocks=scan.blocks, header=header, chunk="c",
            rows=rows, pieces_of=Pieces(piece_bytes, native),
        )  # fmt: skip
    else:
        decoded = decode_window(
            chunk, base=0, blocks=scan.blocks, header=header, chunk="c", native=native
        )
        decoded.keep_only(np.array(keep))
    if how != "columns":
        if how == "lines":
            decoded.lines_only()
        with pytest.raises(RuntimeError):
            decoded.json()
    window = Window("c", header, chunk, 0, header.size, len(chunk), scan)
    window.decoded_as(decoded)
    wanted = [
        orjson.dumps(r) + b"\n" for r, k in zip(fastavro_records(chunk), keep, strict=True) if k
    ]
    got, limit = [], data.draw(st.integers(1, 12), label="batch size")
    while not window.is_used_up:
        batch = window.take(limit, segment="s", shard="log/00/")
        cut = data.draw(st.integers(0, len(batch)), label="cut")
        lines = wanted[len(got) : len(got) + len(batch)]
        assert bytes(batch.json_lines(cut)) == b"".join(lines[:cut])
        assert bytes(batch.json_lines(len(batch))) == b"".join(lines)
        got += lines
    assert len(got) == len(wanted) and decoded.table.num_rows == len(records)
