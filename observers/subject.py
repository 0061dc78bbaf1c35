"""The one reading of an event's subject, `/blobServices/default/containers/<c>/blobs/<name>`:
the container ends at the first `/blobs/`, the rest is the blob's name (which may hold slashes,
`/blobs/` and newlines); a subject without `/blobs/` names a container's own event. The Python
form (`split_subject`) and the Arrow form (`subject_parts`, RE2) read every subject alike
(a hypothesis property in `tests/unit/observers/test_subject.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

SUBJECT_HEAD = "/blobServices/default/containers/"
BLOBS = "/blobs/"
# RE2: the container ends at the first `/blobs/`; the blob part optional, or required
_CONTAINER = rf"(?s)^{SUBJECT_HEAD}(?P<container>.*?)"
_ANY = rf"{_CONTAINER}(?:{BLOBS}(?P<blob>.*))?$"
_BLOB = rf"{_CONTAINER}{BLOBS}(?P<blob>.*)$"


def split_subject(subject: object) -> tuple[str, str | None] | None:
    """`(container, blob name)`; the name None for a container's own event; None when the
    subject names no container of the blob service."""
    if not isinstance(subject, str) or not subject.startswith(SUBJECT_HEAD):
        return None
    container, sep, blob = subject[len(SUBJECT_HEAD) :].partition(BLOBS)
    return container, blob if sep else None


def subject_parts(subjects: pa.Array | pa.ChunkedArray, *, blobs_only: bool = False) -> pa.Array:
    """`{container, blob}` of each subject, as `split_subject` reads it: null where it names no
    container; a container's own event has the blob "" (as a `ChangeEvent` has), or is null
    with `blobs_only`."""
    import pyarrow.compute as pc  # noqa: PLC0415 - loaded with the first batch

    return pc.extract_regex(subjects, _BLOB if blobs_only else _ANY)
