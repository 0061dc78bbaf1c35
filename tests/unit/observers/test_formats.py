"""A batch's JSON lines made from its columns (`format_lines`) are byte for byte the documents
`render` makes of each `ChangeEvent`: on recorded chunks, made-up events of every kind (deletes,
tag changes, tiers), records the initial scan makes, and exact milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pyarrow as pa
import pytest

from observers.builtin.spark.changelog.made_up_records import made_up_records
from observers.envelope import epoch_ms
from observers.events import ArrowBatch, EventBatch
from observers.formats import Format, format_lines, render
from observers.origin import Origin
from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
from processor.changefeed.decoding.columnar import decode_window
from processor.emulator.avro_encoding import RecordEncoder, encode_block, encode_header
from processor.emulator.schemas import writer_schema
from tests.fixtures import RECORDED, RECORDED_CHUNKS

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"
READ_AT = datetime(2026, 11, 26, 8, 0, 0, 123000, tzinfo=UTC)  # on a millisecond


def decoded_batch(data: bytes, chunk: str) -> ArrowBatch:
    header = parse_header(data, chunk=chunk)
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=chunk)
    window = decode_window(data, base=0, blocks=blocks.blocks, header=header, chunk=chunk)
    positions = pa.array([f"p{i:06d}" for i in range(window.table.num_rows)])
    return ArrowBatch(
        window.table,
        positions,
        Origin("03", SEGMENT, "proc", READ_AT),
        json=window.json,
    )


def made_up() -> bytes:
    kinds = ("BlobCreated", "BlobDeleted", "BlobPropertiesUpdated", "BlobTierChanged")
    records = made_up_records(60, kinds=kinds)
    for i, r in enumerate(records):
        r["eventTime"] = f"2026-01-01T00:00:{i % 60:02d}.{i * 1000:07d}Z"  # some on a ms
        r["data"]["blobTier"] = ["Hot", "Cool", None][i % 3]  # type: ignore[index]
        r["data"]["contentType"] = "" if i % 4 == 0 else "text/plain"  # type: ignore[index]
    encoder = RecordEncoder(writer_schema(5))
    sync = bytes(16)
    return encode_header(writer_schema(5), sync) + encode_block(
        [encoder.encode(r) for r in records], sync
    )


def per_event(batch: ArrowBatch, fmt: Format) -> bytes:
    events = EventBatch(batch)
    return b"".join(orjson.dumps(render(e, fmt), option=orjson.OPT_APPEND_NEWLINE) for e in events)


BATCHES = {
    **{
        str(p.relative_to(RECORDED)): (lambda p=p: decoded_batch(p.read_bytes(), str(p)))
        for p in RECORDED_CHUNKS
    },
    "made-up": lambda: decoded_batch(made_up(), "log/03/x/00000.avro"),
    "backfill": lambda: ArrowBatch.from_records(
        [
            {
                "subject": "/blobServices/default/containers/photos/blobs/a b/ç.jpg",
                "eventType": "BlobBackfill",
                "eventTime": "2026-01-01T00:00:00+00:00",
                "id": "i1",
                "data": {
                    "etag": "0x1",
                    "contentLength": 3,
                    "blobTagsUpdated": {"current": {"k": "v"}},
                },
            },
            {
                "subject": "/blobServices/default/containers/photos/blobs/x",
                "eventType": "BlobBackfill",
                "eventTime": "2026-01-01T00:00:00.5+00:00",
                "id": "i2",
                "data": {"etag": "0x2", "contentLength": None, "blobTagsUpdated": None},
            },
        ],
        ["~photos a", "~photos x"],
        Origin("scan-00", "scan/2026-01-01T00:00:00+00:00", "proc", READ_AT),
    ),
}


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_lines_from_columns_are_the_documents_of_each_event(name: str, fmt: Format) -> None:
    batch = BATCHES[name]()
    assert len(batch) > 0
    lines = format_lines(batch, fmt)
    assert lines == per_event(batch, fmt)
    assert len(lines.splitlines()) == len(batch)


def test_epoch_ms_is_exact_on_a_millisecond() -> None:
    """`timestamp() * 1000` in floating point gave 122 for some times at exactly 123 ms."""
    base = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
    for ms in range(1000):
        when = base + timedelta(milliseconds=ms)
        assert epoch_ms(when) == 1795428000000 + ms
    assert epoch_ms(base + timedelta(microseconds=999)) == 1795428000000
