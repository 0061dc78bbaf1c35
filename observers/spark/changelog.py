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

import hashlib
import itertools
import os
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SUFFIX = ".parquet"
SCAN_KEY = "~"  # keys of the initial scan's events start with it (container and blob name)
STEM_CHARS = 56  # of a scan key in a file name: at most 224 bytes of UTF-8, doubled or not


def file_stem(key: str) -> str:
    """The file name (without suffix) of a file whose first event has `key`.

    A change feed key is a name as it is. A scan key holds a blob name: `/` and `.` are escaped
    (`.~` and `..`, which keeps the order of names) and a key longer than `STEM_CHARS` is cut
    there and marked with `.#` and a hash of the whole key (file names have at most 255 bytes).
    Cut names with one prefix sort by hash among themselves, so `ChangeLog.tail` reads them all.
    """
    if not key.startswith(SCAN_KEY):
        return key
    stem = key[:STEM_CHARS].replace(".", "..").replace("/", ".~")
    if len(key) > STEM_CHARS:
        stem += ".#" + hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:16]
    return stem


class ChangeLogError(Exception):
    """The change log directory holds something we did not write (named with its path)."""


@dataclass(frozen=True, slots=True)
class Published:
    """What one `publish` call made visible for a lease."""

    file: Path | None  # None: every row was in the log already
    rows: int
    skipped: int  # rows already in the log (a replay, or another writer was first)
    tail: str | None  # the lease's tail after this call, as far as this writer knows


@dataclass(frozen=True, slots=True)
class Staged:
    """A Parquet file holding a contiguous range of one lease's events, `first` to `last`."""

    path: Path
    lease: str
    first: str
    last: str
    rows: int


def staged_file(path: Path) -> Staged | None:
    """`path`'s lease and range from its footer statistics (no rows are read); None when it
    holds several leases' rows or has no statistics."""
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as e:
        raise ChangeLogError(f"{path}: cannot read it: {e}") from e
    names = meta.schema.names
    if "shard" not in names or "position" not in names:
        return None
    bounds: dict[str, list[str]] = {"shard": [], "position": []}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for name, found in bounds.items():
            stats = group.column(names.index(name)).statistics
            if stats is None or not stats.has_min_max:
                return None
            found += [str(stats.min), str(stats.max)]
    shards, positions = set(bounds["shard"]), bounds["position"]
    if len(shards) != 1 or not positions:
        return None
    return Staged(path, shards.pop(), min(positions), max(positions), meta.num_rows)


def lease_sources(files: Sequence[Path]) -> dict[str, list[pa.Table | Staged]]:
    """Files Spark wrote, grouped by lease, each lease's in chain order.

    A file holding several leases' rows (or without statistics) is split into tables; when a
    lease's files' ranges interleave, its rows become one table (a link must be a range)."""
    found: dict[str, list[pa.Table | Staged]] = defaultdict(list)
    for path in files:
        staged = staged_file(path)
        if staged is not None:
            found[staged.lease].append(staged)
            continue
        table = _read(path, None)
        for lease in pc.unique(table["shard"]).to_pylist():
            found[str(lease)].append(table.filter(pc.equal(table["shard"], lease)))
    return {lease: _in_chain_order(sources) for lease, sources in found.items()}


def _bounds(source: pa.Table | Staged) -> tuple[str, str]:
    if isinstance(source, Staged):
        return source.first, source.last
    positions = source.column("position")
    return str(pc.min(positions).as_py()), str(pc.max(positions).as_py())


def _in_chain_order(sources: list[pa.Table | Staged]) -> list[pa.Table | Staged]:
    ranked = sorted(sources, key=_bounds)
    if all(_bounds(a)[1] < _bounds(b)[0] for a, b in itertools.pairwise(ranked)):
        return ranked
    tables = (_read(s.path, None) if isinstance(s, Staged) else s for s in ranked)
    return [pa.concat_tables(tables, promote_options="permissive")]


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
        group = [names[-1]]
        if ".#" in names[-1]:  # a cut scan key: the last of its prefix may sort anywhere in it
            prefix = names[-1][: names[-1].rindex(".#") + 2]
            group = [n for n in names if n.startswith(prefix)]
        tails = []
        for name in group:
            last = self.lease_dir(lease) / (name + SUFFIX)
            column = _read(last, ["position"]).column("position")
            if len(column) == 0:
                raise ChangeLogError(f"{last}: an empty file in the change log")
            tails.append(str(pc.max(column).as_py()))
        return max(tails)

    def publish(
        self,
        lease: str,
        source: pa.Table | Staged,
        *,
        tail: str | None = None,
        known: bool = False,
    ) -> Published:
        """Make `source`'s rows (one lease's events, any order) visible exactly once.

        `source` is a table, or a staged Parquet file (as Spark wrote it) that is linked into
        place as is when all its rows are new. `tail`, when `known`, is the lease's tail as
        this writer last saw it (saves reading it; a stale one only costs a retry).
        """
        if not known:
            tail = self.tail(lease)
        staged = source if isinstance(source, Staged) else None
        total = source.rows if isinstance(source, Staged) else source.num_rows
        table = source if isinstance(source, pa.Table) else None
        while True:
            if staged is not None:  # decided by its range, without reading it
                if tail is not None and tail >= staged.last:
                    return Published(None, 0, total, tail)
                if tail is None or tail < staged.first:
                    target = self.lease_dir(lease) / (file_stem(staged.first) + SUFFIX)
                    if self._link(staged.path, None, target):
                        return Published(target, staged.rows, 0, staged.last)
                    tail = self.tail(lease)  # another writer took this name
                    continue
                table, staged = _read(staged.path, None), None
            assert table is not None
            positions = table.column("position")
            if tail is not None:
                table = table.filter(pc.greater(positions, pa.scalar(tail)))
                positions = table.column("position")
            if table.num_rows == 0:
                return Published(None, 0, total, tail)
            first, last = str(pc.min(positions).as_py()), str(pc.max(positions).as_py())
            target = self.lease_dir(lease) / (file_stem(first) + SUFFIX)
            if self._link(None, table, target):
                return Published(target, table.num_rows, total - table.num_rows, last)
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
