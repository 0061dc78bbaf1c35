"""Fields of decoded records as Arrow columns, whatever the schema version gives."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.record_columns import (
    as_numpy_mask,
    blob_paths,
    field,
    text,
)

RECORDS = pa.table(
    {
        "subject": [
            "/blobServices/default/containers/photos/blobs/2026/a/blobs/b.jpg",
            "/blobServices/default/containers/photos",
            None,
        ],
        "eventTime": ["2026-01-01T00:00:00.1234567Z", "2026-01-01T01:00:00", "yesterday"],
        "eventType": pa.array(["BlobCreated", "Control", "BlobDeleted"]).dictionary_encode(),
        "data": [{"blobType": "BlockBlob", "size": 1}, None, {"blobType": None, "size": 3}],
    }
)


def test_a_field_by_path_is_null_under_a_null_parent_and_absent_when_the_schema_lacks_it() -> None:
    blob_type = field(RECORDS, "data", "blobType")
    assert blob_type is not None and blob_type.to_pylist() == ["BlockBlob", None, None]
    assert field(RECORDS, "data", "tier") is None
    assert field(RECORDS, "topic") is None
    assert field(RECORDS, "subject", "x") is None  # not a struct


def test_text_decodes_enums_and_gives_nulls_for_what_is_not_text() -> None:
    assert text(RECORDS, "eventType").to_pylist() == ["BlobCreated", "Control", "BlobDeleted"]
    assert text(RECORDS, "data", "size").to_pylist() == [None, None, None]
    assert text(RECORDS, "api").to_pylist() == [None, None, None]


def test_the_container_ends_at_the_first_blobs() -> None:
    assert blob_paths(RECORDS).to_pylist() == [
        {"container": "photos", "blob": "2026/a/blobs/b.jpg"},
        None,
        None,
    ]


@given(st.lists(st.none() | st.booleans(), max_size=40), st.integers(0, 40))
def test_a_mask_is_the_column_with_nulls_false_at_any_offset(
    values: list[bool | None], cut: int
) -> None:
    column = pa.chunked_array([pa.array(values, pa.bool_()).slice(min(cut, len(values)))])
    expected = [bool(v) for v in values[min(cut, len(values)) :]]
    assert as_numpy_mask(column).tolist() == expected
