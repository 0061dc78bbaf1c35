"""The fenced change log (`ChangeLog`, `LeaseFence`) against a model of Delta's rules for
idempotent writes, over every schedule of owners, zombies paused mid-write, crashes between a
commit and its checkpoint, and ambiguous commits (tests/fence_model.py): each event once. The
same schedules run against real Delta tables in tests/integration/test_delta_tables.py.

The model (delta-spark 4.4, ../shared/research/delta_fencing.md): a write with `txnAppId` and
`txnVersion` reads the table's snapshot when it starts; it is skipped, silently, when that
snapshot records a version at or above its own for the app id; it fails with
`ConcurrentTransactionException` when a commit since its snapshot set the app id; otherwise it
commits its rows and the version. Without the options nothing is skipped or refused, which is
what a table without the fence would do: the model then finds duplicates.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import Phase, example, find, given, settings
from hypothesis import strategies as st

from observers.builtin.spark.changelog.change_log import ChangeLog
from observers.builtin.spark.changelog.fence import (
    MAX_EPOCH,
    MAX_SEQUENCE,
    FenceRangeError,
    LeaseFence,
    above,
    txn_version,
)
from tests import patience
from tests.fence_model import (
    Gate,
    Run,
    Step,
    assert_played,
    feed_rows,
    position,
    schedules,
)

MAX_QUERY = re.compile(r"shard = '([^']*)'(?: AND position >= '([^']*)')?")


@dataclass
class Commit:
    txn: tuple[str, int] | None
    positions: list[str]


@dataclass
class ModelDelta:
    honours_txn: bool = True
    commits: list[Commit] = field(default_factory=list)

    def recorded(self, app: str, at: int) -> int:
        versions = [c.txn[1] for c in self.commits[:at] if c.txn and c.txn[0] == app]
        return versions[-1] if versions else -1

    def save(self, frame: ModelFrame, options: dict[str, str]) -> None:
        snapshot = len(self.commits)
        app, version = options.get("txnAppId"), int(options.get("txnVersion", "-1"))
        txn = (app, version) if app is not None and self.honours_txn else None
        skipped = txn is not None and self.recorded(txn[0], snapshot) >= version
        if frame.in_flight is not None:
            frame.in_flight()  # the write is open: others commit meanwhile
        if skipped:
            return
        if txn is not None and any(c.txn and c.txn[0] == app for c in self.commits[snapshot:]):
            raise RuntimeError(f"ConcurrentTransactionException: app id {app} was set")
        self.commits.append(Commit(txn, frame.table.column("position").to_pylist()))

    def positions(self) -> list[str]:
        return [p for c in self.commits for p in c.positions]


@dataclass
class ModelFrame:
    table: pa.Table
    delta: ModelDelta
    in_flight: Callable[[], None] | None = None

    @property
    def write(self) -> ModelWriter:
        return ModelWriter(self.delta, self)


class ModelWriter:
    def __init__(self, delta: ModelDelta, frame: ModelFrame) -> None:
        self.delta, self.frame, self.options = delta, frame, dict[str, str]()

    def format(self, _: str) -> ModelWriter:
        return self

    def mode(self, _: str) -> ModelWriter:
        return self

    def option(self, key: str, value: str) -> ModelWriter:
        self.options[key] = value
        return self

    def save(self, _: str) -> None:
        self.delta.save(self.frame, self.options)


@dataclass
class ModelSession:
    delta: ModelDelta

    def createDataFrame(self, data: Any, schema: Any = None) -> Any:
        if isinstance(data, list):  # no rows (a fence), of the columns `schema` gives
            assert not data and "`position` STRING" in schema
            data = pa.table({"position": pa.array([], pa.string())})
        return ModelFrame(data, delta=self.delta)

    def sql(self, text: str) -> Any:
        match = MAX_QUERY.search(text)
        assert match, text
        lease_rows = [p for p in self.delta.positions() if match[2] is None or p >= match[2]]
        top = max(lease_rows, default=None)
        return type("Result", (), {"collect": lambda _: [{"top": top}]})()


class ModelGate(Gate):
    def __init__(self) -> None:
        self._started, self._go = threading.Event(), threading.Event()

    def hold(self, frame: Any) -> Any:
        def in_flight() -> None:
            self._started.set()
            assert self._go.wait(patience.left_s())

        frame.real.in_flight = in_flight
        return frame

    def started(self) -> bool:
        return self._started.is_set()

    def release(self) -> None:
        self._go.set()


def run(
    schedule: list[Step], *, honours_txn: bool = True, fence_ahead: bool = False
) -> tuple[Run, ModelDelta]:
    delta = ModelDelta(honours_txn)
    game = Run(ChangeLog("model"), lambda _host: ModelSession(delta), ModelGate, "p", fence_ahead)
    assert_played(game, schedule, delta.positions)
    return game, delta


# a zombie woken between the owner's fence and its floor read (a floor read before the fence
# lets its rows in twice)
WOKEN_AFTER_THE_FENCE = [
    ("take", "a"),
    ("write", "a", 3, (("take", "b"), ("write", "b", 3, (), 0)), 2),
]


@settings(max_examples=300, deadline=None)
@given(schedules(), st.booleans())
@example(schedule=WOKEN_AFTER_THE_FENCE, ahead=False)
def test_each_event_once_whoever_writes_and_whenever(schedule: list[Step], ahead: bool) -> None:
    """Owners that fence at their first write, or when they take the lease."""
    run(schedule, fence_ahead=ahead)


def test_without_the_fence_the_model_finds_an_event_twice() -> None:
    """The same schedules with a table that ignores the transaction ids: a zombie's late write
    lands after the next owner's floor."""

    def duplicates(schedule: list[Step]) -> bool:
        try:
            run(schedule, honours_txn=False)
        except AssertionError as e:
            return "twice: []" not in str(e)
        return False

    found = find(
        schedules(),
        duplicates,
        settings=settings(max_examples=2000, database=None, phases=[Phase.generate]),
    )
    assert duplicates(found)


def test_a_zombie_woken_after_the_fence_is_refused_and_one_woken_before_is_floored() -> None:
    after = [("take", "a"), ("write", "a", 3, (("take", "b"), ("write", "b", 2, (), 0)), 9)]
    game, _ = run(after)
    assert game.outcomes["LeaseFenced"] == 1
    before = [("take", "a"), ("write", "a", 3, (), 0), ("take", "b"), ("write", "b", 5, (), 0)]
    game, delta = run(before)
    assert delta.positions()[:3] == [position(i) for i in range(3)]  # b left them out


def test_an_ambiguous_commit_is_not_written_twice() -> None:
    game, _ = run([("take", "a"), ("ambiguous", "a", 4), ("write", "a", 6, (), 0)])
    assert game.outcomes["CommittedThenLost"] == 1


def test_a_lease_table_made_anew_stops_its_owner_fenced_and_loses_nothing() -> None:
    """The change log's fence (epoch 3) stays above the new table's epochs (1, 2): the owners'
    appends are skipped, the check after each sync finds it, and no checkpoint moves past."""
    schedule = [("take", "a"), ("take", "b"), ("take", "c"), ("write", "c", 9, (), 0)]
    game, _ = run([*schedule, ("reset", "c"), ("take", "b"), ("write", "b", 5, (), 0)])
    assert game.outcomes["LeaseFenced"] >= 2 and game.lease.checkpoint <= 9  # what c wrote


def test_versions_order_like_epoch_then_sequence_and_refuse_what_they_cannot_hold() -> None:
    assert txn_version(1, 0) > txn_version(0, MAX_SEQUENCE)
    assert txn_version(MAX_EPOCH, MAX_SEQUENCE) < 2**63
    for epoch, sequence in ((-1, 0), (MAX_EPOCH + 1, 0), (0, MAX_SEQUENCE + 1)):
        with pytest.raises(FenceRangeError):
            txn_version(epoch, sequence)


def test_a_lease_reopened_at_its_epoch_never_uses_a_version_twice() -> None:
    fence = LeaseFence("00", "p/00", 4)
    used = [fence.next_version(), fence.next_version()]
    fence.reopened(4)
    used.append(fence.next_version())
    fence.reopened(5)
    used.append(fence.next_version())
    assert used == sorted(set(used)) and used[-1] == txn_version(5, 0)
    assert not fence.synced


def test_a_sync_ahead_that_the_lease_outlived_leaves_it_unsynced() -> None:
    fence = LeaseFence("00", "p/00", 4)
    asked = fence.generation
    fence.reopened(4)  # opened again while its floor was being read
    fence.synced_at(position(3), asked)
    assert not fence.synced and fence.floor is None
    fence.synced_at(position(3), fence.generation)
    assert fence.synced and fence.floor == position(3)


def test_rows_at_or_below_the_floor_are_left_out() -> None:
    rows = feed_rows(0, 5)
    assert above(rows, None).num_rows == 5
    assert above(rows, position(2)).column("position").to_pylist() == [position(3), position(4)]


def test_a_floor_read_from_a_later_position_is_read_again_for_rows_below_it() -> None:
    """The chaos suite's find: while Spark was away a lease queued rows an owner before it had
    written; once back, its sync ahead was asked by a later batch, and read the floor from
    that batch's first position on: it saw nothing, and the queued rows went in twice. A floor
    speaks only for positions from where it was read; a write with rows below reads it again."""
    delta = ModelDelta()
    session, log = ModelSession(delta), ChangeLog("model")
    before = LeaseFence("00", "p/00", 1)  # the previous owner wrote events 0-3
    log.write(session, before, feed_rows(0, 4))
    fence = LeaseFence("00", "p/00", 2)  # the next: queued 0-5 while away, then 6-7 came
    log.sync(session, fence, at_least=position(6))  # the sync ahead asked by the later batch
    assert fence.synced and fence.floor is None and not fence.floor_covers(position(0))
    written = log.write(session, fence, feed_rows(0, 6))
    assert (written.rows, written.appended, written.synced) == (6, 2, True)
    assert delta.positions() == [position(i) for i in range(6)]  # each once
    assert fence.floor == position(5) and fence.floor_covers(position(0))
