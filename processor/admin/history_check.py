"""`cfp verify`'s check of the history table: its open versions are the state table's rows.

A blob's open version (`valid_to` NULL) is the blob after its newest event, which is what its
state row holds: the same event (sequencer), deleted or not, the same ETag. A blob with no open
version, with two, or with one that disagrees with its state row is a difference. Read with
delta-rs, as the state is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from processor.admin.verify import VerifyError

Key = tuple[str, str]  # container, blob
Version = tuple[str, bool, str | None]  # sequencer, deleted, etag

OPEN_VERSIONS = (
    "SELECT container, blob, valid_from_sequencer AS sequencer, deleted, etag FROM history "
    "WHERE valid_to_sequencer IS NULL"
)
STATE_ROWS = "SELECT container, blob, sequencer, deleted, etag FROM state"


def history_differences(
    open_versions: Iterable[tuple[Key, Version]], state: Mapping[Key, Version]
) -> list[str]:
    """What differs between the open versions and the state rows, a line per blob, sorted."""
    versions: dict[Key, list[Version]] = {}
    for key, version in open_versions:
        versions.setdefault(key, []).append(version)
    out = []
    for key in sorted(versions.keys() | state.keys()):
        mine, row = versions.get(key, []), state.get(key)
        where = f"{key[0]}/{key[1]}"
        if row is None:
            out.append(f"{where}: an open version in the history, no row in the state")
        elif not mine:
            out.append(f"{where}: a row in the state, no open version in the history")
        elif len(mine) > 1:
            out.append(f"{where}: {len(mine)} open versions in the history")
        elif mine[0] != row:
            out.append(f"{where}: open version {_said(mine[0])}, state row {_said(row)}")
    return out


def _said(version: Version) -> str:
    sequencer, deleted, etag = version
    return f"{'deleted' if deleted else 'etag ' + repr(etag)} at sequencer {sequencer}"


def check_history(
    history_uri: str, state_uri: str, storage_options: Mapping[str, str]
) -> list[str] | None:
    """The differences (blocking); None when there is no history table (`--no-history`).
    Errors: `VerifyError` for a table that cannot be read."""
    options = dict(storage_options) or None
    try:
        history = DeltaTable(history_uri, storage_options=options)
    except TableNotFoundError:
        return None
    try:
        state = DeltaTable(state_uri, storage_options=options)
        query = QueryBuilder().register("history", history).register("state", state)
        opened = pa.table(query.execute(OPEN_VERSIONS)).to_pylist()
        rows = pa.table(query.execute(STATE_ROWS)).to_pylist()
    except (DeltaError, OSError, pa.ArrowException) as e:
        raise VerifyError(f"{history_uri}: cannot read the history table: {e}") from e
    return history_differences(
        (((r["container"], r["blob"]), _version(r)) for r in opened),
        {(r["container"], r["blob"]): _version(r) for r in rows},
    )


def _version(row: Mapping[str, object]) -> Version:
    etag = row["etag"]
    return (str(row["sequencer"]), bool(row["deleted"]), None if etag is None else str(etag))
