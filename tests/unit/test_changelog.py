"""The change log's publishing protocol: replays, zombies and racing writers add nothing twice."""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observers.spark.changelog import (
    ChangeLog,
    ChangeLogError,
    Staged,
    lease_sources,
    staged_file,
)

LEASE = "03"


def events(keys: list[str]) -> pa.Table:
    return pa.table(
        {"id": [f"id-{k}" for k in keys], "shard": [LEASE] * len(keys), "position": keys}
    )


def staged(path: Path, keys: list[str]) -> Staged:
    """`keys` written to `path` as Spark would stage them, described by the file's footer."""
    pq.write_table(events(keys), path)
    found = staged_file(path)
    assert found is not None
    return found


def published(log: ChangeLog) -> list[str]:
    lease_dir = log.lease_dir(LEASE)
    if not lease_dir.exists():
        return []
    rows: list[str] = []
    for path in sorted(lease_dir.glob("*.parquet")):
        rows += pq.read_table(path).column("position").to_pylist()
    return rows


def test_a_replayed_batch_adds_nothing_and_a_longer_one_only_its_new_rows(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    keys = [f"k{i:03d}" for i in range(10)]
    first = log.publish(LEASE, events(keys[:4]))
    assert first.file is not None and first.file.name == "k000.parquet" and first.tail == "k003"
    again = log.publish(LEASE, events(keys[:4]))  # crash after the write, before the checkpoint
    assert again.file is None and again.skipped == 4
    longer = log.publish(LEASE, events(keys[:7]))  # the replay cut the batch elsewhere
    assert longer.file is not None and longer.file.name == "k004.parquet"
    assert (longer.rows, longer.skipped) == (3, 4)
    assert published(log) == keys[:7]
    assert log.tail(LEASE) == "k006"


def test_a_zombie_with_a_stale_tail_publishes_nothing_twice(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    keys = [f"k{i:03d}" for i in range(12)]
    log.publish(LEASE, events(keys[:3]))
    zombie_tail = log.tail(LEASE)  # then the zombie pauses with rows 3..8 written by Spark
    log.publish(LEASE, events(keys[3:5]))  # the new owner, smaller batches
    log.publish(LEASE, events(keys[5:6]))
    late = log.publish(LEASE, events(keys[3:9]), tail=zombie_tail, known=True)
    assert late.file is not None and late.file.name == "k006.parquet"  # only what was missing
    owner = log.publish(LEASE, events(keys[6:12]), tail="k005", known=True)
    assert owner.rows == 3 and owner.skipped == 3
    assert published(log) == keys


def test_a_staged_file_is_linked_as_is_when_every_row_is_new(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path / "changes")
    first = staged(tmp_path / "staged.parquet", ["b", "a"])
    assert (first.lease, first.first, first.last, first.rows) == (LEASE, "a", "b", 2)
    done = log.publish(LEASE, first)
    assert done.file is not None and done.file.name == "a.parquet"
    assert done.file.stat().st_ino == first.path.stat().st_ino  # no copy
    assert log.publish(LEASE, first).skipped == 2  # a replay of it: decided by its range
    again = staged(tmp_path / "again.parquet", ["a", "c", "b"])  # a replay with one more row
    rest = log.publish(LEASE, again)
    assert rest.file is not None and rest.file.name == "c.parquet" and rest.skipped == 2
    assert rest.file.stat().st_ino != again.path.stat().st_ino
    assert sorted(published(log)) == ["a", "b", "c"] and len(published(log)) == 3


def test_a_foreign_empty_file_is_named_in_the_error(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    log.lease_dir(LEASE).mkdir(parents=True)
    bad = log.lease_dir(LEASE) / "zzz.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(ChangeLogError, match=r"zzz\.parquet"):
        log.tail(LEASE)


@dataclass
class Writer:
    """A host's view of the lease: where its reader stands and the tail it last saw."""

    cursor: int = 0
    tail: str | None = None
    staged: list[tuple[int, int]] = field(default_factory=list)  # batches read, not published


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_interleaving_of_writers_publishes_each_event_once_and_no_gap(
    data: st.DataObject,
) -> None:
    keys = [f"{i:04d}" for i in range(data.draw(st.integers(1, 40)))]
    with tempfile.TemporaryDirectory() as tmp:
        log = ChangeLog(Path(tmp))
        checkpoint = 0
        writers = [Writer() for _ in range(3)]
        for _ in range(data.draw(st.integers(1, 30))):
            w = data.draw(st.sampled_from(writers))
            action = data.draw(st.sampled_from(["open", "read", "publish"]))
            if action == "open":  # (re)start: from the lease's checkpoint, learning the tail
                w.cursor, w.tail, w.staged = checkpoint, log.tail(LEASE), []
            elif action == "read" and w.cursor < len(keys):
                n = data.draw(st.integers(1, 8))
                w.staged.append((w.cursor, min(w.cursor + n, len(keys))))
                w.cursor = min(w.cursor + n, len(keys))
            elif action == "publish" and w.staged:  # possibly long after it was read
                lo, hi = w.staged.pop(0)
                source: pa.Table | Staged = events(keys[lo:hi])
                if data.draw(st.booleans()):  # as a file Spark wrote, decided by its range
                    source = staged(Path(tmp) / f"{uuid.uuid4().hex}.parquet", keys[lo:hi])
                done = log.publish(LEASE, source, tail=w.tail, known=True)
                w.tail = done.tail
                checkpoint = max(checkpoint, hi)  # the host checkpoints after the write
            rows = published(log)
            assert rows == keys[: len(rows)], "a duplicate or a gap"
        finisher = Writer(cursor=checkpoint, tail=log.tail(LEASE))
        log.publish(LEASE, events(keys[finisher.cursor :]), tail=finisher.tail, known=True)
        assert published(log) == keys


def test_spark_files_become_chain_links_by_lease_split_or_merged_when_needed(
    tmp_path: Path,
) -> None:
    a, b, c = (tmp_path / f"{n}.parquet" for n in "abc")
    pq.write_table(events(["k3", "k4"]), a)
    pq.write_table(events(["k1", "k2"]), b)
    sources = lease_sources([a, b])
    assert [s.path for s in sources[LEASE]] == [b, a]  # type: ignore[union-attr]  # chain order
    pq.write_table(events(["k1", "k4"]), a)  # interleaved with b's k2..k3: one merged table
    pq.write_table(events(["k2", "k3"]), b)
    [merged] = lease_sources([a, b])[LEASE]
    assert isinstance(merged, pa.Table)
    assert sorted(merged.column("position").to_pylist()) == ["k1", "k2", "k3", "k4"]
    mixed = pa.concat_tables(
        [events(["k5"]), pa.table({"id": ["x"], "shard": ["09"], "position": ["k1"]})]
    )
    pq.write_table(mixed, c)  # two leases in one file: split into a table each
    split = lease_sources([c])
    assert sorted(split) == [LEASE, "09"] and all(
        isinstance(s[0], pa.Table) for s in split.values()
    )
