"""The change log directory: each event exactly once to any Parquet reader, whoever writes it.

Layout: `<root>/lease=<token>/<key>.parquet`, where `<key>` is the `position` of the file's first
event (`event_key`: it sorts like the lease's events, and the same event has the same key for
every reader of the feed). Each lease's files form a chain: a file starts with the event right
after the last event of the file before it, so the files never overlap and leave no gap.

Publishing a staged file is `os.link` to its final name, which fails if the name exists: an
atomic "create if absent" on POSIX file systems. Every writer drops the events up to the chain's
tail as it knows it and names its file by its first remaining event, which is the event right
after that tail. Two writers that know the same tail therefore race for the same name and one
loses; a writer that knows an old tail asks for a name that was taken long ago. The loser
re-reads the tail, drops what is now published and tries again with the rest. So a batch
replayed after a crash (the checkpoint lags the log) and the late write of a paused host (a
zombie) add nothing twice, and concurrent hosts never clobber each other: files are only ever
created, never replaced.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SUFFIX = ".parquet"


class ChangeLogError(Exception):
    """The change log directory holds something we did not write (named with its path)."""


@dataclass(frozen=True, slots=True)
class Published:
    """What one `publish` call made visible for a lease."""

    file: Path | None  # None: every row was in the log already
    rows: int
    skipped: int  # rows already in the log (a replay, or another writer was first)
    tail: str | None  # the lease's tail after this call, as far as this writer knows


class ChangeLog:
    def __init__(self, root: Path) -> None:
        self.root = root

    def lease_dir(self, lease: str) -> Path:
        return self.root / f"lease={lease}"

    def tail(self, lease: str) -> str | None:
        """The position of the last event published for `lease`; None when nothing is."""
        names = self._names(lease)
        if not names:
            return None
        last = self.lease_dir(lease) / (names[-1] + SUFFIX)
        column = _read(last, ["position"]).column("position")
        if len(column) == 0:
            raise ChangeLogError(f"{last}: an empty file in the change log")
        return str(pc.max(column).as_py())

    def publish(
        self,
        lease: str,
        source: pa.Table | Path,
        *,
        tail: str | None = None,
        known: bool = False,
    ) -> Published:
        """Make `source`'s rows (one lease's events, any order) visible exactly once.

        `source` is a table, or a Parquet file (as Spark wrote it) that is linked into place as
        is when all its rows are new. `tail`, when `known`, is the lease's tail as this writer
        last saw it (saves reading it; a stale one only costs a retry).
        """
        if not known:
            tail = self.tail(lease)
        if isinstance(source, Path):
            positions = _read(source, ["position"]).column("position")
        else:
            positions = source.column("position")
        total = len(positions)
        table = source if isinstance(source, pa.Table) else None
        staged = source if isinstance(source, Path) else None
        while True:
            keep = None if tail is None else pc.greater(positions, pa.scalar(tail))
            fresh = positions if keep is None else positions.filter(keep)
            if len(fresh) == 0:
                return Published(None, 0, total, tail)
            if keep is not None and len(fresh) < len(positions):  # write the rest ourselves
                if table is None:
                    assert staged is not None
                    table = _read(staged, None)
                table = table.filter(keep)
                positions, staged = table.column("position"), None
            first, last = str(pc.min(fresh).as_py()), str(pc.max(fresh).as_py())
            target = self.lease_dir(lease) / (first + SUFFIX)
            if self._link(staged, table, target):
                return Published(target, len(fresh), total - len(fresh), last)
            tail = self.tail(lease)  # another writer took this name: publish what is left

    def _link(self, staged: Path | None, rows: pa.Table | None, target: Path) -> bool:
        target.parent.mkdir(parents=True, exist_ok=True)
        own: Path | None = None
        if staged is None:
            assert rows is not None
            own = target.parent / f".{uuid.uuid4().hex}.staged"
            pq.write_table(rows.sort_by("position"), own)
            staged = own
        try:
            os.link(staged, target)
        except FileExistsError:
            return False
        finally:
            if own is not None:
                own.unlink(missing_ok=True)
        return True

    def _names(self, lease: str) -> list[str]:
        try:
            entries = os.listdir(self.lease_dir(lease))
        except FileNotFoundError:
            return []
        return sorted(e.removesuffix(SUFFIX) for e in entries if e.endswith(SUFFIX))


def _read(path: Path, columns: list[str] | None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise ChangeLogError(f"{path}: cannot read it: {e}") from e
