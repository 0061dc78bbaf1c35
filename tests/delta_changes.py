"""What a Delta table's commits wrote, read from its change data feed with delta-rs: the chaos
runner's and the freshness bench's view of the state table (and the change log's, the hints')."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

WRITTEN = ("insert", "update_postimage")  # the change types that are a row as written


def written_rows(
    uri: str, *columns: str, storage_options: Mapping[str, str] | None = None
) -> pa.Table:
    """Every row the table's commits wrote (inserts and post-images), as `columns` with
    `_commit_version` and `_commit_timestamp`; strings as plain strings (delta-rs gives string
    views, which pyarrow's kernels do not all take)."""
    table = DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    wanted = [*columns, "_change_type", "_commit_version", "_commit_timestamp"]
    rows = pa.table(table.load_cdf(starting_version=0)).select(wanted)
    plain = pa.schema(
        pa.field(f.name, pa.string()) if f.type == pa.string_view() else f for f in rows.schema
    )
    rows = rows.cast(plain)
    return rows.filter(pc.is_in(rows["_change_type"], pa.array(WRITTEN))).drop_columns(
        ["_change_type"]
    )
