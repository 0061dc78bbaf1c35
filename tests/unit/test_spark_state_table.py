"""The state table's files: one visible file per bucket, versions made by compare-and-swap, no
update lost when processes write the same buckets at once, late writers harmless."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from observers.spark.state import STATE_SCHEMA, merge_state
from observers.spark.state_table import StateTable, StateTableError
from tests.unit.test_spark_state import BLOBS, Event, as_state, model, seen


def table(root: Path, buckets: int = 4) -> StateTable:
    t = StateTable(root / "state", root / "_cfp" / "state", buckets=buckets)
    t.open()
    return t


def visible(root: Path) -> pa.Table:
    """What a plain Parquet reader of the state folder sees."""
    return ds.dataset(root / "state", format="parquet").to_table()


def test_a_new_table_shows_every_bucket_empty_with_the_schema(tmp_path: Path) -> None:
    t = table(tmp_path)
    assert sorted(os.listdir(tmp_path / "state")) == [f"part-{b:05d}.parquet" for b in range(4)]
    assert visible(tmp_path).num_rows == 0
    assert pq.read_schema(t.visible_file(0)) == STATE_SCHEMA
    assert table(tmp_path, buckets=9).buckets == 4  # fixed by whoever made it


def test_rows_land_once_per_blob_and_a_replay_writes_nothing(tmp_path: Path) -> None:
    t = table(tmp_path)
    events = [Event(b, s, "created", s) for b in range(3) for s in (1, 2)]
    first = t.apply(as_state(events))
    assert first.buckets >= 1 and first.conflicts == 0
    assert seen(visible(tmp_path)) == model(events)
    versions = {b: t.versions(b) for b in range(4)}
    again = t.apply(as_state(events[:3]))
    assert (again.buckets, again.unchanged) == (0, again.unchanged) and again.unchanged >= 1
    assert {b: t.versions(b) for b in range(4)} == versions


def _apply_in_another_process(root: str, seed: int) -> None:
    t = StateTable(Path(root) / "state", Path(root) / "_cfp" / "state")
    t.open()
    for i in range(12):
        t.apply(as_state([Event(i % len(BLOBS), seed * 100 + i, "props", seed)]))


def test_processes_writing_the_same_buckets_lose_no_update(tmp_path: Path) -> None:
    table(tmp_path, buckets=1)  # every blob in one bucket: every write contends
    with ProcessPoolExecutor(3) as pool:
        list(pool.map(_apply_in_another_process, [str(tmp_path)] * 3, [1, 2, 3]))
    events = [Event(i % len(BLOBS), s * 100 + i, "props", s) for s in (1, 2, 3) for i in range(12)]
    assert seen(visible(tmp_path)) == model(events)
    assert len(StateTable(tmp_path / "state", tmp_path / "_cfp" / "state").versions(0)) <= 2


def test_a_late_writer_with_old_events_changes_nothing(tmp_path: Path) -> None:
    live, zombie = table(tmp_path), table(tmp_path)
    zombie.apply(as_state([Event(0, 1, "created", 1)]))  # the zombie knew version 2
    live.apply(as_state([Event(0, 2, "props", 2), Event(0, 3, "deleted", 3)]))
    late = zombie.apply(as_state([Event(0, 1, "created", 1), Event(0, 2, "props", 2)]))
    assert late.buckets == 0  # its cached version is stale: it read the newest, which had them
    assert seen(visible(tmp_path))[BLOBS[0]]["deleted"] is True


def test_a_visible_file_left_behind_is_repaired(tmp_path: Path) -> None:
    t = table(tmp_path, buckets=1)
    t.apply(as_state([Event(0, 1, "created", 1)]))
    old = t.versions(0)[-1]
    t.apply(as_state([Event(0, 2, "props", 2)]))
    os.link(t._path(0, old), tmp_path / "old")  # a writer stopped after swapping in an old one
    os.replace(tmp_path / "old", t.visible_file(0))
    assert seen(visible(tmp_path))[BLOBS[0]]["content_length"] == 1
    table(tmp_path)  # the next host to open the table
    assert seen(visible(tmp_path))[BLOBS[0]]["content_length"] == 2


def test_files_it_did_not_write_are_named(tmp_path: Path) -> None:
    t = table(tmp_path, buckets=1)
    newest = t._path(0, t.versions(0)[-1] + 1)
    newest.write_bytes(b"not parquet")
    with pytest.raises(StateTableError, match=re.escape(str(newest))):
        t.apply(as_state([Event(0, 1, "created", 1)]))
    (newest.parent / "notes.parquet").write_bytes(b"")
    with pytest.raises(StateTableError, match=r"notes\.parquet: not a version"):
        t.versions(0)


def test_merge_state_of_nothing_is_empty() -> None:
    assert merge_state([STATE_SCHEMA.empty_table()]).num_rows == 0


class Interrupted(StateTable):
    """A writer that another writer overtakes between reading a bucket and committing it."""

    def __init__(self, root: Path, other: StateTable, events: list[Event]) -> None:
        super().__init__(root / "state", root / "_cfp" / "state")
        self.open()
        self.other, self.events = other, events

    def _read_newest(self, bucket: int) -> tuple[int, pa.Table]:
        read = super()._read_newest(bucket)
        if self.events:
            self.other.apply(as_state(self.events))
            self.events = []
        return read


def test_a_writer_overtaken_between_read_and_commit_folds_again(tmp_path: Path) -> None:
    other = table(tmp_path, buckets=1)
    slow = Interrupted(tmp_path, other, [Event(1, 5, "created", 5)])
    applied = slow.apply(as_state([Event(0, 1, "created", 1)]))
    assert applied.conflicts == 1
    assert seen(visible(tmp_path)) == model([Event(1, 5, "created", 5), Event(0, 1, "created", 1)])
