"""The user's filter: what it accepts (Arrow compute over a batch), checked against a plain reading
of its definition, and that it survives the lease table (to_json/from_json) unchanged."""

from __future__ import annotations

import fnmatch
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.change_filter import (
    BACKFILL_EVENT,
    ChangeFilter,
    FilterError,
    blob_path,
)

NAMES = st.sampled_from(["logs", "logs-1", "logs-22", "raw", "raw-logs", "x"])
GLOBS = st.sampled_from(["logs", "logs-*", "raw*", "*-1", "x?", "[lr]aw"])
BLOBS = st.sampled_from(["a/b.txt", "a/c", "b/a", "2026/01/x", "", "a"])
EVENTS = st.sampled_from(["BlobCreated", "BlobDeleted", "BlobPropertiesUpdated", BACKFILL_EVENT])
TYPES = st.sampled_from(["BlockBlob", "AppendBlob", "PageBlob"])


def record(container: str, blob: str, event: str, blob_type: str) -> dict[str, Any]:
    return {
        "subject": f"/blobServices/default/containers/{container}/blobs/{blob}",
        "eventType": event,
        "data": {"blobType": blob_type},
    }


def batch_of(records: list[dict[str, Any]]) -> pa.Table:
    """Records as the decoder gives them: enums dictionary-encoded, `data` a struct."""
    table = pa.Table.from_pylist(records)
    if "eventType" in table.column_names:
        at = table.column_names.index("eventType")
        table = table.set_column(at, "eventType", pc.dictionary_encode(table.column(at)))
    return table


def accepted(f: ChangeFilter, records: list[dict[str, Any]]) -> list[bool]:
    keep = f.mask(batch_of(records))
    return [True] * len(records) if keep is None else keep.to_pylist()


@given(
    containers=st.lists(GLOBS, max_size=3),
    prefix=st.sampled_from(["", "a", "a/", "2026/"]),
    events=st.lists(EVENTS.filter(lambda e: e != BACKFILL_EVENT), max_size=2),
    types=st.lists(TYPES, max_size=2),
    recs=st.lists(st.tuples(NAMES, BLOBS, EVENTS, TYPES), min_size=1, max_size=8),
)
def test_accepts_exactly_what_each_field_allows(
    containers: list[str],
    prefix: str,
    events: list[str],
    types: list[str],
    recs: list[tuple[str, str, str, str]],
) -> None:
    f = ChangeFilter.of(
        containers=containers, blob_prefix=prefix, event_types=events, blob_types=types
    )
    expected = [
        (not containers or any(fnmatch.fnmatchcase(container, g) for g in containers))
        and blob.startswith(prefix)
        and (not events or event in events or event == BACKFILL_EVENT)
        and (not types or blob_type in types)
        for container, blob, event, blob_type in recs
    ]
    batch = [record(*r) for r in recs]
    assert accepted(f, batch) == expected
    # the container verdicts are cached: asking again gives the same answer
    assert accepted(f, batch) == expected


@given(
    containers=st.lists(GLOBS, max_size=3),
    prefix=st.sampled_from(["", "a/", "x y"]),
    events=st.lists(EVENTS, max_size=2),
    types=st.lists(TYPES, max_size=3),
)
def test_a_filter_reads_back_equal_and_in_one_canonical_text(
    containers: list[str], prefix: str, events: list[str], types: list[str]
) -> None:
    f = ChangeFilter.of(
        containers=containers, blob_prefix=prefix, event_types=events, blob_types=types
    )
    again = ChangeFilter.from_json(f.to_json(), where="test")
    assert again == f
    assert again.text() == f.text()
    shuffled = ChangeFilter.of(
        containers=[*reversed(containers), *containers],
        blob_prefix=prefix,
        event_types=reversed(events),
        blob_types=types,
    )
    assert shuffled.text() == f.text()


def test_an_event_without_a_blob_subject_is_not_in_any_container() -> None:
    f = ChangeFilter.of(containers=["*"])
    batch = [
        {"subject": "/blobServices/default", "eventType": "BlobCreated"},
        {"subject": None, "eventType": "BlobCreated"},
        {"subject": "/blobServices/default/containers/c/blobs/a", "eventType": "BlobCreated"},
    ]
    assert accepted(f, batch) == [False, False, True]
    assert accepted(ChangeFilter(), [{"eventType": "BlobCreated"}]) == [True]
    assert accepted(f, [{"eventType": "BlobCreated"}]) == [False]  # no subject field at all
    assert blob_path("/blobServices/default/containers/c/blobs/a/b") == ("c", "a/b")
    assert blob_path("/blobServices/default/containers/c") is None


def test_a_container_ends_at_the_first_blobs_and_names_may_hold_anything() -> None:
    subjects = ["c/blobs/x/blobs/y", "c/blobs/line\nbreak", "c/blobs/", "c/blob/x"]
    batch = [
        {"subject": f"/blobServices/default/containers/{s}", "eventType": "BlobCreated"}
        for s in subjects
    ]
    assert accepted(ChangeFilter.of(containers=["c"], blob_prefix="x/blobs"), batch) == [
        True,
        False,
        False,
        False,
    ]
    assert accepted(ChangeFilter.of(blob_prefix="line"), batch) == [False, True, False, False]


def test_a_blob_type_filter_refuses_an_event_without_data() -> None:
    f = ChangeFilter.of(blob_types=["BlockBlob"])
    batch = [{"eventType": "BlobCreated"}, {"eventType": "BlobDeleted"}]
    assert accepted(f, batch) == [False, False]
    with_data = [{"eventType": "BlobCreated", "data": None}, *batch_with_types()]
    assert accepted(f, with_data) == [False, True, False]


def batch_with_types() -> list[dict[str, Any]]:
    return [
        {"eventType": "BlobCreated", "data": {"blobType": "BlockBlob"}},
        {"eventType": "BlobCreated", "data": {"blobType": None}},
    ]


@pytest.mark.parametrize(
    "doc",
    [[], {"containers": "logs"}, {"eventTypes": [1]}, {"blobPrefix": 3}],
)
def test_a_malformed_stored_filter_is_named(doc: object) -> None:
    with pytest.raises(FilterError, match="in the table"):
        ChangeFilter.from_json(doc, where="in the table")


def test_describe_says_everything_or_what_narrows_it() -> None:
    assert ChangeFilter().describe() == "everything"
    f = ChangeFilter.of(containers=["logs-*", "raw"], event_types=["BlobCreated"])
    assert f.describe() == "container logs-* or raw, event type BlobCreated"
