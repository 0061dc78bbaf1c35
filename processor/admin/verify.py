"""`cfp verify`: the current-state table against a live listing of the storage account.

The comparison is a pure function of two sets of blobs; reading the Delta table (the `deltalake`
package, delta-rs: a reader independent of the Spark that wrote it, deletion vectors included) and
listing the account (azure-storage-blob, every container except the `$`-prefixed system ones and
the tables' own) are the I/O around it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from azure.core.exceptions import AzureError
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from processor import connection

FIELDS = ("etag", "size", "content_type")


class VerifyError(Exception):
    """The state table or the account cannot be read (names what and where)."""


@dataclass(frozen=True, slots=True)
class Blob:
    container: str
    name: str
    etag: str
    size: int | None
    content_type: str | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.container, self.name)


@dataclass(frozen=True, slots=True)
class Difference:
    container: str
    name: str
    problem: str  # "missing from the state", "not in the account", or the differing fields
    state: Blob | None
    account: Blob | None

    def describe(self) -> str:
        where = f"{self.container}/{self.name}"
        if self.state is None or self.account is None:
            return f"{where}: {self.problem}"
        state, account = self.state, self.account
        fields = [
            f"{f} {getattr(state, f)!r} in the state, {getattr(account, f)!r} in the account"
            for f in self.problem.split(",")
        ]
        return f"{where}: {'; '.join(fields)}"


@dataclass(frozen=True, slots=True)
class Comparison:
    state_blobs: int
    account_blobs: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def is_equal(self) -> bool:
        return not self.differences

    def count(self, problem: str) -> int:
        return sum(1 for d in self.differences if d.problem == problem)


def compare(state: Iterable[Blob], account: Iterable[Blob]) -> Comparison:
    """Every live blob of the state against every blob of the account, by name, ETag, size
    and content type; differences sorted by container and name."""
    mine = {b.key: b for b in state}
    theirs = {b.key: b for b in account}
    differences = []
    for key in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(key), theirs.get(key)
        if a is None:
            differences.append(Difference(*key, "missing from the state", None, b))
        elif b is None:
            differences.append(Difference(*key, "not in the account", a, None))
        elif unequal := [f for f in FIELDS if getattr(a, f) != getattr(b, f)]:
            differences.append(Difference(*key, ",".join(unequal), a, b))
    return Comparison(len(mine), len(theirs), differences)


STATE_QUERY = "SELECT container, blob, deleted, etag, content_length, content_type{} FROM state"
PROVISIONAL = ", coalesce(provisional, false) AS provisional"


@dataclass(frozen=True, slots=True)
class StateRead:
    """What the state table holds: its live blobs, its tombstones, and its provisional rows
    (those whose newest change is a hint the feed has not confirmed; 0 without hints)."""

    blobs: list[Blob]
    tombstones: int
    provisional: int = 0


def read_state(uri: str, storage_options: Mapping[str, str]) -> StateRead:
    """The state table at `uri`, its newest version (blocking)."""
    try:
        state = DeltaTable(uri, storage_options=dict(storage_options) or None)
        hinted = "provisional" in {f.name for f in state.schema().fields}
        query = STATE_QUERY.format(PROVISIONAL if hinted else "")
        reader = QueryBuilder().register("state", state).execute(query)
        table = pa.table(reader)
    except TableNotFoundError as e:
        raise VerifyError(f"{uri}: no state table here (is --output the hosts' --output?)") from e
    except (DeltaError, OSError, pa.ArrowException) as e:
        raise VerifyError(f"{uri}: cannot read the state table: {e}") from e
    table = table.cast(
        pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema])
    )  # string views, as delta-rs hands them, to plain strings
    deleted = table["deleted"]
    live = table.filter(pc.invert(deleted))
    blobs = [
        Blob(r["container"], r["blob"], r["etag"] or "", r["content_length"], r["content_type"])
        for r in live.to_pylist()
    ]
    provisional = pc.sum(table["provisional"]).as_py() or 0 if hinted else 0
    return StateRead(blobs, table.num_rows - live.num_rows, int(provisional))


def _plain(kind: pa.DataType) -> pa.DataType:
    return pa.string() if kind == pa.string_view() else kind


async def list_account(conn: str, *, leave_out: Collection[str] = ()) -> list[Blob]:
    """Every blob of every container except the `$`-prefixed system containers and those in
    `leave_out` (the tables' own, when they live in this account)."""
    out: list[Blob] = []
    try:
        async with connection.blob_service(conn) as service:
            async for container in service.list_containers():
                if container.name.startswith("$") or container.name in leave_out:
                    continue
                client = service.get_container_client(container.name)
                async for b in client.list_blobs():
                    settings = b.content_settings
                    out.append(
                        Blob(
                            container.name,
                            b.name,
                            (b.etag or "").strip('"'),
                            b.size,
                            settings.content_type if settings is not None else None,
                        )
                    )
    except AzureError as e:
        raise VerifyError(f"listing the account failed: {type(e).__name__}: {e.message}") from e
    return out
