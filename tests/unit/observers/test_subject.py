"""One reading of a subject: the Python form and the Arrow form agree on every string."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from observers.subject import SUBJECT_HEAD, split_subject, subject_parts

PIECES = st.sampled_from(["c", "a/b", "/blobs/", "/blobs", "blobs/", "\n", "", "é", "x y"])
SUBJECTS = st.one_of(
    st.lists(PIECES, max_size=5).map(lambda p: SUBJECT_HEAD + "".join(p)),
    st.lists(PIECES, max_size=4).map("".join),
    st.text(max_size=20),
)


@given(st.lists(SUBJECTS, max_size=8))
def test_the_python_and_the_arrow_reading_agree(subjects: list[str]) -> None:
    column = pa.array(subjects, pa.large_string())
    every = subject_parts(column).to_pylist()
    blobs = subject_parts(column, blobs_only=True).to_pylist()
    for subject, any_part, blob_part in zip(subjects, every, blobs, strict=True):
        parts = split_subject(subject)
        expected = None if parts is None else {"container": parts[0], "blob": parts[1] or ""}
        assert any_part == expected  # a container's own event: its blob "", as a ChangeEvent's
        assert blob_part == (None if parts is None or parts[1] is None else expected)


def test_the_container_ends_at_the_first_blobs_and_the_name_keeps_the_rest() -> None:
    head = SUBJECT_HEAD
    assert split_subject(f"{head}c/blobs/a/blobs/b\nc") == ("c", "a/blobs/b\nc")
    assert split_subject(f"{head}logs") == ("logs", None)  # a container's own event
    assert split_subject("/blobServices/default/other") is None
    assert split_subject(None) is None
