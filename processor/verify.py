"""`cfp verify`: the current-state table against a live listing of the storage account.

The comparison is a pure function of two sets of blobs; reading the table (pyarrow) and listing
the account (azure-storage-blob, every container except the `$`-prefixed system ones) are the
I/O around it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from azure.core.exceptions import AzureError

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


def read_state(folder: Path) -> tuple[list[Blob], int]:
    """The live blobs of the state table in `folder`, and how many tombstones it holds."""
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        raise VerifyError(f"{folder}: no state table here (is --output the hosts' --output?)")
    columns = ["container", "blob", "deleted", "etag", "content_length", "content_type"]
    try:
        table = ds.dataset(folder, format="parquet").to_table(columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise VerifyError(f"{folder}: cannot read the state table: {e}") from e
    deleted = table["deleted"]
    live = table.filter(pc.invert(deleted))
    blobs = [
        Blob(r["container"], r["blob"], r["etag"] or "", r["content_length"], r["content_type"])
        for r in live.to_pylist()
    ]
    return blobs, table.num_rows - live.num_rows


async def list_account(conn: str) -> list[Blob]:
    """Every blob of every container except the `$`-prefixed system containers."""
    out: list[Blob] = []
    try:
        async with connection.blob_service(conn) as service:
            async for container in service.list_containers():
                if container.name.startswith("$"):
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
