"""Fields of decoded records as Arrow columns, whatever the chunk's schema version: by path, enums
as text, a field the schema lacks as nulls. What the filters read; pure functions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from observers.subject import subject_parts

TEXT = pa.large_string()


def as_numpy_mask(keep: pa.ChunkedArray) -> np.ndarray:
    """A boolean column as a numpy mask (null: False), unpacked from its bits: pyarrow's own
    `to_numpy` imports pandas (1-2 s) to check its version, which nothing of ours needs."""
    packed = pc.fill_null(keep, pa.scalar(False, pa.bool_())).combine_chunks()
    if len(packed) == 0:
        return np.zeros(0, bool)
    bits = np.unpackbits(np.frombuffer(packed.buffers()[1], dtype=np.uint8), bitorder="little")
    return bits[packed.offset : packed.offset + len(packed)].view(bool)


def field(table: pa.Table, *path: str) -> pa.ChunkedArray | None:
    """The column at `path` (`"data", "blobType"`), None when the records have no such field.
    A child is null where its parent struct is."""
    if path[0] not in table.column_names:
        return None
    values: pa.ChunkedArray = table.column(path[0])
    for name in path[1:]:
        kind = values.type
        if not pa.types.is_struct(kind) or kind.get_field_index(name) < 0:
            return None
        values = pc.struct_field(values, name)
    return values


def text(table: pa.Table, *path: str) -> pa.ChunkedArray:
    """The field at `path` as text: enum symbols decoded, nulls where the field is absent or is
    not text."""
    values = field(table, *path)
    if values is None:
        return pa.chunked_array([pa.nulls(table.num_rows, TEXT)], TEXT)
    kind = values.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return pa.chunked_array([pa.nulls(table.num_rows, TEXT)], TEXT)
    return pc.cast(values, TEXT)


def blob_paths(table: pa.Table) -> pa.ChunkedArray:
    """`{container, blob}` of each record's subject; null where the subject names no blob."""
    subject = text(table, "subject")
    return subject_parts(subject, blobs_only=True)
