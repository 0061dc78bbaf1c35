"""The fenced change log's protocol as schedules of owners, zombies, crashes and ambiguous commits,
run through the real `ChangeLog` against a Delta table: a model of Delta's rules in
tests/unit/observers/builtin/spark/changelog/test_fence_model.py, a real table in tests/integration/test_delta_tables.py.

A schedule is a list of steps on one lease, by hosts that behave as cfp's do:

- `take`: the host takes the lease (the next epoch) and reads from its checkpoint; whoever held
  it before becomes a zombie, which goes on as if nothing happened;
- `write`: the host appends its next `k` events; while the write is in flight (its Delta
  transaction open), the `inner` steps happen, and it is woken after `wake` of their Spark
  calls (a zombie paused mid-write, woken before, between or after the next owner's fence,
  floor read and appends);
- `ambiguous`: the same, but the commit lands and the host is told it failed;
- `checkpoint`: the host moves the lease's checkpoint to what it has committed (refused unless it
  holds the lease at its epoch);
- `crash`: the host forgets everything (it takes the lease again to go on);
- `reset`: the lease table is made anew (epochs start again from 1, beside the same change log).

A write that fails makes the host read again from the lease's checkpoint, and open the lease
again (at the same epoch) when it still holds it. At the end a new host takes the lease and
drains it; the change log must then hold each event of the feed exactly once. After a reset,
the drain may instead stop fenced (the change log's fence is above any epoch of the new lease
table), but then no checkpoint has passed an event that is not in the change log.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from hypothesis import strategies as st

from observers.builtin.spark.changelog.change_log import ChangeLog, LeaseFenced
from observers.builtin.spark.changelog.fence import LeaseFence, app_id
from observers.changes import records_table
from observers.origin import Origin

LEASE = "00"
EVENTS = 20
HOSTS = ("a", "b", "c")
SEGMENT = "idx/segments/2026/01/01/0100/meta.json"

Step = tuple[Any, ...]


def position(i: int) -> str:
    return f"2026010101{i:08d}"


def feed_rows(first: int, count: int) -> pa.Table:
    """Events `first`.. of the lease, as change log rows."""
    keys = list(range(first, first + count))
    records = [
        {
            "subject": f"/blobServices/default/containers/c/blobs/b{i}",
            "eventType": "BlobCreated",
            "eventTime": "2026-01-01T01:00:00Z",
            "id": f"e{i}",
            "data": {"sequencer": f"{i:016x}"},
        }
        for i in keys
    ]
    return records_table(records, [position(i) for i in keys], Origin(LEASE, SEGMENT))


def _step(depth: int) -> st.SearchStrategy[Step]:
    host = st.sampled_from(HOSTS)
    k = st.integers(1, 6)
    inner = st.lists(_step(depth - 1), max_size=3).map(tuple) if depth else st.just(())
    return st.one_of(
        st.tuples(st.just("take"), host),
        st.tuples(st.just("write"), host, k, inner, st.integers(0, 8)),
        st.tuples(st.just("ambiguous"), host, k),
        st.tuples(st.just("checkpoint"), host),
        st.tuples(st.just("crash"), host),
        st.tuples(st.just("reset"), host),
    )


def schedules(max_size: int = 10) -> st.SearchStrategy[list[Step]]:
    """Schedules that start with a host taking the lease."""
    first = st.tuples(st.just("take"), st.sampled_from(HOSTS))
    return st.tuples(first, st.lists(_step(1), max_size=max_size)).map(lambda t: [t[0], *t[1]])


class CommittedThenLost(Exception):
    """The commit landed; its answer did not (an ambiguous commit)."""


class Gate(Protocol):
    """Holds one write inside its Delta transaction: `hold` wraps its DataFrame, `started`
    tells it is held, `release` lets it go on. The model's or real Delta's (files that the
    held Spark task polls)."""

    def hold(self, frame: Any) -> Any: ...

    def started(self) -> bool: ...

    def release(self) -> None: ...


class Proxy:
    """A host's Spark session as the change log sees it: each Spark call of a host other than a
    held one ticks the run's clock first (`before`); an ambiguous session's appends commit,
    then raise."""

    def __init__(self, real: Any, before: Callable[[], None], ambiguous: bool) -> None:
        self.real, self.before, self.ambiguous = real, before, ambiguous

    def createDataFrame(self, data: Any, schema: Any = None) -> Any:
        if schema is None:
            return _Frame(self, self.real.createDataFrame(data))
        return _Frame(self, self.real.createDataFrame(data, schema))

    def sql(self, text: str) -> Any:
        self.before()
        return self.real.sql(text)


class _Frame:
    def __init__(self, session: Proxy, real: Any) -> None:
        self.session, self.real = session, real

    @property
    def write(self) -> _Writer:
        return _Writer(self.session, self.real.write)


class _Writer:
    def __init__(self, session: Proxy, real: Any) -> None:
        self.session, self.real = session, real

    def format(self, name: str) -> _Writer:
        return _Writer(self.session, self.real.format(name))

    def mode(self, name: str) -> _Writer:
        return _Writer(self.session, self.real.mode(name))

    def option(self, key: str, value: str) -> _Writer:
        return _Writer(self.session, self.real.option(key, value))

    def save(self, uri: str) -> None:
        self.session.before()
        self.real.save(uri)
        if self.session.ambiguous:
            raise CommittedThenLost("the commit's answer was lost")


@dataclass
class LeaseRow:
    owner: str | None = None
    epoch: int = 0
    checkpoint: int = 0  # the next event to read


@dataclass
class HostView:
    epoch: int | None = None  # the epoch it took the lease at (None: not held, or crashed)
    cursor: int = 0  # the next event it reads
    committed: int = 0  # everything before is in the change log
    fence: LeaseFence | None = None


@dataclass
class Held:
    gate: Gate
    thread: threading.Thread
    wake_at: int  # the run's Spark calls after which it is released


@dataclass
class Run:
    """One schedule against a table: `session_of(host)` gives a host's Spark session (each its
    own, on one Delta), `gate()` a new `Gate`."""

    log: ChangeLog
    session_of: Callable[[str], Any]
    gate: Callable[[], Gate]
    processor: str = "p"
    fence_ahead: bool = False  # a taker fences and reads its floor at once (as the Spark sink)
    lease: LeaseRow = field(default_factory=LeaseRow)
    hosts: dict[str, HostView] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    calls: int = 0  # Spark calls of unheld writers so far
    held: list[Held] = field(default_factory=list)

    def play(self, schedule: list[Step]) -> bool:
        """Play `schedule`, then drain the lease; False when the drain stopped fenced."""
        for step in schedule:
            self.step(step)
        self.step(("take", "z"))  # an honest host drains the lease
        for _ in range(2 * EVENTS):
            if self.lease.checkpoint == EVENTS:
                return True
            self.step(("write", "z", 7, (), 0))
            self.step(("checkpoint", "z"))
        if self.outcomes["reset"] and self.outcomes["LeaseFenced"]:
            return False
        raise AssertionError(f"the lease's last owner cannot drain it: {self.outcomes}")

    def view(self, host: str) -> HostView:
        return self.hosts.setdefault(host, HostView())

    def step(self, step: Step) -> None:
        kind, host = step[0], step[1]
        view = self.view(host)
        if kind == "take":
            self.lease.owner, self.lease.epoch = host, self.lease.epoch + 1
            view.epoch = self.lease.epoch
            view.cursor = view.committed = self.lease.checkpoint
            self.open(view)
            if self.fence_ahead and view.fence is not None:  # as soon as it can (the sink's
                # fence at open, its floor read at the first batch): zombies act after both
                session, fence = Proxy(self.session_of(host), self.tick, False), view.fence
                self.log.fence_ahead(session, fence)
                self.log.sync(
                    session, fence, at_least=position(view.cursor), generation=fence.generation
                )
        elif kind == "checkpoint":
            if self.holds(host) and view.committed > self.lease.checkpoint:
                self.lease.checkpoint = view.committed
        elif kind == "crash":
            self.hosts[host] = HostView()
        elif kind == "reset":
            self.lease = LeaseRow()
            self.outcomes["reset"] += 1
        elif kind == "write":
            self.write(host, step[2], step[3], step[4])
        elif kind == "ambiguous":
            self.write(host, step[2], (), 0, ambiguous=True)

    def open(self, view: HostView) -> None:
        """The host opens the lease (as the Spark sink's `open_lease`)."""
        assert view.epoch is not None
        if view.fence is None:
            view.fence = LeaseFence(LEASE, app_id(self.processor, LEASE), view.epoch)
        else:
            view.fence.reopened(view.epoch)

    def holds(self, host: str) -> bool:
        return self.lease.owner == host and self.lease.epoch == self.view(host).epoch

    def tick(self) -> None:
        """Before a Spark call of an unheld writer: release the held writes that are due."""
        if threading.current_thread() is not threading.main_thread():
            return  # a held write's own calls
        self.calls += 1
        for held in [h for h in self.held if h.wake_at <= self.calls]:
            self.wake(held)

    def wake(self, held: Held) -> None:
        self.held.remove(held)
        held.gate.release()
        held.thread.join()

    def write(
        self, host: str, k: int, inner: tuple[Step, ...], wake: int, *, ambiguous: bool = False
    ) -> None:
        view = self.view(host)
        count = min(k, EVENTS - view.cursor)
        if view.epoch is None or view.fence is None or count <= 0:
            return
        rows, fence = feed_rows(view.cursor, count), view.fence
        session = Proxy(self.session_of(host), self.tick, ambiguous)
        failed: list[BaseException] = []
        if not inner:
            try:
                self.log.write(session, fence, rows)
            except (LeaseFenced, CommittedThenLost) as e:  # anything else is a bug: raised
                failed.append(e)
        else:
            gate = self.gate()

            def held_write() -> None:
                try:
                    self.log.write(session, fence, rows, hold=gate.hold)
                except BaseException as e:
                    failed.append(e)

            thread = threading.Thread(target=held_write, name=f"held-{host}")
            thread.start()
            while thread.is_alive() and not gate.started():
                thread.join(0.01)  # until it is held, or ended before its append
            held = Held(gate, thread, self.calls + wake)
            self.held.append(held)
            for step in inner:
                if step[1] != host:  # a host's own writes of a lease never overlap
                    self.step(step)
            if held in self.held:
                self.wake(held)
            if failed and not isinstance(failed[0], (LeaseFenced, CommittedThenLost)):
                raise failed[0]
        self.settle(host, count, failed)

    def settle(self, host: str, count: int, failed: list[BaseException]) -> None:
        """After a write: go on, or read again from the checkpoint (reopening the lease)."""
        view = self.view(host)  # (an inner step may have crashed it)
        if not failed:
            self.outcomes["written"] += 1
            view.cursor += count
            view.committed = view.cursor
            return
        self.outcomes[type(failed[0]).__name__] += 1
        if view.epoch is not None and self.holds(host):
            view.cursor = view.committed = self.lease.checkpoint
            self.open(view)
        else:
            view.epoch = None


def assert_each_event_once(positions: list[str], *, upto: int = EVENTS) -> None:
    """Each event of the change log once, and none missing below event `upto`."""
    counts = Counter(positions)
    twice = sorted(p for p, n in counts.items() if n > 1)
    missing = [position(i) for i in range(upto) if position(i) not in counts]
    assert not twice and not missing, f"twice: {twice}; missing: {missing}"


def assert_played(run: Run, schedule: list[Step], positions: Callable[[], list[str]]) -> None:
    """Play `schedule` and check the change log: each event once, all of them once drained,
    and, after a fenced drain, all those below the checkpoint."""
    drained = run.play(schedule)
    assert_each_event_once(positions(), upto=EVENTS if drained else run.lease.checkpoint)
