"""The current-state table on disk: one Parquet file per key bucket, rewritten copy-on-write.

```
OUTPUT/state/part-00007.parquet            what readers see: exactly one file per bucket
OUTPUT/_cfp/state/layout.json              {"buckets": 16}, fixed by whoever makes the table
OUTPUT/_cfp/state/00007/0000000042.parquet the bucket's versions
```

A blob's bucket is `crc32("container/blob") % buckets`. Applying new rows to a bucket reads its
newest version, folds the rows in (`merge_state`) and creates the next version with `os.link`,
which fails when that version exists: a compare-and-swap. A writer that loses reads the version
that won and folds again, so two hosts writing the same bucket at once never lose an update.
Because the fold depends only on the set of events applied, a zombie's late write (old events,
a stale view) is harmless too: it can only add events the sequencer guard already orders.

Readers see `state/part-B.parquet`, a hard link to a version swapped in with `rename`, which is
atomic: a reader sees the old file or the new one, never both or neither. The visible file can
lag the newest version for a moment (a writer stopped between the two steps); every writer
re-checks after its swap, and `repair()` (run when a host opens the table) catches up the rest.
"""

from __future__ import annotations

import json
import os
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from observers.spark.state import STATE_SCHEMA, merge_state

SUFFIX = ".parquet"
KEEP_VERSIONS = 2  # the newest and the one before; older ones are deleted by the next writer


class StateTableError(Exception):
    """The state table's files are not what this module writes (named with the path)."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What one `apply` call did."""

    buckets: int  # buckets that got a new version
    unchanged: int  # buckets whose rows already held every event (a replay)
    conflicts: int  # versions another writer created first (each cost one more fold)


class StateTable:
    """Driven by the host's Spark sink, once per Spark write, from one thread at a time."""

    def __init__(self, visible: Path, internal: Path, *, buckets: int = 16) -> None:
        self.visible = visible
        self.internal = internal
        self.buckets = buckets
        self._cache: dict[int, tuple[int, pa.Table]] = {}  # bucket -> the version we wrote last

    def open(self) -> None:
        """Make the table if it does not exist (or take the bucket count it was made with),
        give every bucket a first version, and bring every visible file up to date."""
        self.internal.mkdir(parents=True, exist_ok=True)
        self.visible.mkdir(parents=True, exist_ok=True)
        layout = self.internal / "layout.json"
        if not layout.exists():
            _create(layout, json.dumps({"buckets": self.buckets}).encode())
        try:
            self.buckets = int(json.loads(layout.read_text())["buckets"])
        except (ValueError, KeyError, TypeError) as e:
            raise StateTableError(f"{layout}: not a state table layout: {e}") from e
        empty = STATE_SCHEMA.empty_table()
        for bucket in range(self.buckets):
            if self._newest(bucket)[0] == 0:
                self._commit(bucket, 1, empty)  # losing this race to another host is fine
        self.repair()

    def apply(self, rows: pa.Table) -> Applied:
        """Fold `STATE_SCHEMA` rows into their buckets; returns once every touched bucket's
        newest version and visible file hold them."""
        written = unchanged = conflicts = 0
        for bucket, part in self._split(merge_state([rows])):
            while True:
                version, current = self._read_newest(bucket)
                merged = merge_state([current, part])
                if merged.equals(current):
                    unchanged += 1
                    break
                if self._commit(bucket, version + 1, merged):
                    self._cache[bucket] = (version + 1, merged)
                    written += 1
                    self._forget_old(bucket, version + 1)
                    break
                conflicts += 1
            self._publish(bucket)
        return Applied(written, unchanged, conflicts)

    def repair(self) -> None:
        """Point every visible file at its bucket's newest version."""
        for bucket in range(self.buckets):
            self._publish(bucket)

    def versions(self, bucket: int) -> list[int]:
        try:
            names = os.listdir(self._dir(bucket))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.endswith(SUFFIX):
                try:
                    out.append(int(name.removesuffix(SUFFIX)))
                except ValueError:
                    raise StateTableError(f"{self._dir(bucket) / name}: not a version") from None
        return sorted(out)

    def bucket_of(self, container: str, blob: str) -> int:
        return zlib.crc32(f"{container}/{blob}".encode()) % self.buckets

    def visible_file(self, bucket: int) -> Path:
        return self.visible / f"part-{bucket:05d}{SUFFIX}"

    def _split(self, rows: pa.Table) -> Iterator[tuple[int, pa.Table]]:
        if rows.num_rows == 0:
            return
        pairs = zip(rows["container"].to_pylist(), rows["blob"].to_pylist(), strict=True)
        buckets = pa.array([self.bucket_of(c, b) for c, b in pairs], pa.int32())
        for bucket in pc.unique(buckets).sort().to_pylist():
            yield bucket, rows.filter(pc.equal(buckets, bucket))

    def _dir(self, bucket: int) -> Path:
        return self.internal / f"{bucket:05d}"

    def _path(self, bucket: int, version: int) -> Path:
        return self._dir(bucket) / f"{version:010d}{SUFFIX}"

    def _newest(self, bucket: int) -> tuple[int, Path | None]:
        versions = self.versions(bucket)
        return (versions[-1], self._path(bucket, versions[-1])) if versions else (0, None)

    def _read_newest(self, bucket: int) -> tuple[int, pa.Table]:
        while True:
            version, path = self._newest(bucket)
            if path is None:
                return 0, STATE_SCHEMA.empty_table()
            cached = self._cache.get(bucket)
            if cached is not None and cached[0] == version:
                return cached
            try:
                table = pq.read_table(path, schema=STATE_SCHEMA)
            except FileNotFoundError:
                continue  # deleted as old by a writer that just made a newer one
            except (OSError, pa.ArrowException) as e:
                raise StateTableError(f"{path}: cannot read it: {e}") from e
            return version, table

    def _commit(self, bucket: int, version: int, table: pa.Table) -> bool:
        """Create `version` of `bucket` holding `table`; False when it exists already."""
        self._dir(bucket).mkdir(parents=True, exist_ok=True)
        staged = self._dir(bucket) / f".{uuid.uuid4().hex}.staged"
        try:
            pq.write_table(table, staged)
            os.link(staged, self._path(bucket, version))
        except FileExistsError:
            return False
        finally:
            staged.unlink(missing_ok=True)
        return True

    def _publish(self, bucket: int) -> None:
        """Swap the visible file to the newest version until it is the newest version: a
        writer that swapped in an older one after us is undone by its own re-check."""
        target = self.visible_file(bucket)
        while True:
            _, newest = self._newest(bucket)
            if newest is None or _same_file(newest, target):
                return
            staged = self.internal / f".{uuid.uuid4().hex}.visible"
            try:
                os.link(newest, staged)
            except FileNotFoundError:
                continue  # replaced and deleted meanwhile: look again
            try:
                os.rename(staged, target)
            finally:
                staged.unlink(missing_ok=True)  # rename does nothing if both are one file

    def _forget_old(self, bucket: int, newest: int) -> None:
        for version in self.versions(bucket):
            if version <= newest - KEEP_VERSIONS:
                self._path(bucket, version).unlink(missing_ok=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _create(path: Path, content: bytes) -> None:
    """Write `path` unless it exists (then keep what is there): stage, then link."""
    staged = path.with_name(f".{uuid.uuid4().hex}.staged")
    staged.write_bytes(content)
    try:
        os.link(staged, path)
    except FileExistsError:
        pass
    finally:
        staged.unlink(missing_ok=True)
