"""Hosts racing over one MemoryLeaseStore: the lease protocol as a hypothesis state machine.

Each simulated host runs the real pieces (the quiet-tick listing of `leases/policy/watching.py` with its
expiry tracker, plan_takes, the store's conditional writes and re-reads) on a fake monotonic
clock: a settled host lists only the slices it watches; hypothesis interleaves ticks, renewals,
checkpoints, hand-overs, crashes, pauses and new hosts, balancing by count or by load (each
lease with its own read rate, written with every renewal). After every step: no two hosts hold
the same lease at the same epoch, every checkpoint that landed came from the lease's current
epoch, no continuation went backwards; after enough quiet ticks every lease has a live owner and
the hosts are balanced (by count: within one lease; by load: no host plans another move).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from leases import (
    BalanceLimits,
    HostId,
    Lease,
    LeaseToken,
    LoadRule,
    MemoryLeaseStore,
    TakePlan,
    plan_takes,
)
from leases.policy.watching import (
    EVERYTHING,
    TableView,
    balance_note,
    expired_to_take,
    in_ranges,
    is_settled,
    ranges_to_list,
    watch_ranges,
)

EXPIRY = 10.0
WHEN = datetime(2026, 1, 1, tzinfo=UTC)  # checkpoint time: recorded, never compared
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class SimHost:
    name: HostId
    view: TableView
    rng: random.Random
    held: dict[LeaseToken, Lease] = field(default_factory=dict)
    stale: dict[LeaseToken, Lease] = field(default_factory=dict)  # what it held before a restart
    renewed_at: dict[LeaseToken, float] = field(default_factory=dict)
    alive: bool = True
    settled: bool = False  # its last tick found nothing to do: the next lists its slices only
    ticks: int = 0
    full_at: int | None = None  # the tick of its last full listing


class LeaseProtocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryLeaseStore()
        self.now = 0.0
        self.hosts: dict[str, SimHost] = {}
        self.progress: dict[LeaseToken, int] = {}
        self.next_host = 0
        self.by_load: LoadRule | None = None
        self.rates: dict[LeaseToken, float] = {}

    @initialize(
        leases=st.integers(1, 12),
        hosts=st.integers(1, 4),
        by_load=st.booleans(),
        rates=st.lists(st.floats(0, 1e6), min_size=12, max_size=12),
    )
    def setup(self, leases: int, hosts: int, by_load: bool, rates: list[float]) -> None:
        self.by_load = LoadRule() if by_load else None
        for i in range(leases):
            token = LeaseToken(f"{i:02d}")
            run(self.store.create_if_absent(token, "0"))
            self.rates[token] = rates[i]
        for _ in range(hosts):
            self.add_host()

    @rule()
    def add_host(self) -> None:
        name = HostId(f"h{self.next_host}")
        self.next_host += 1
        self.hosts[name] = SimHost(name, TableView.empty(EXPIRY), random.Random(self.next_host))

    def live(self) -> list[SimHost]:
        return [h for h in self.hosts.values() if h.alive]

    @rule(data=st.data())
    def tick(self, data: st.DataObject) -> None:
        hosts = self.live()
        if not hosts:
            return
        self._tick(data.draw(st.sampled_from(hosts)))

    def _tick(self, host: SimHost) -> TakePlan:
        host.ticks += 1
        since = None if host.full_at is None else host.ticks - host.full_at
        note = run(self.store.processor_state()).balance
        watched = watch_ranges(host.view.rows, host.view.hosts(), host.name)
        ranges = ranges_to_list(
            host.view,
            host.name,
            settled=host.settled and self.by_load is None,  # by load: every rate, every tick
            ticks_since_full=since,
            note=note,
            mine=len(host.held),
            watched=watched,
        )
        if ranges == [EVERYTHING]:
            host.full_at = host.ticks
            rows = run(self.store.list_leases())
        else:
            rows = [x for lo, hi in ranges for x in run(self.store.list_range(lo, hi))]
        fresh, views = host.view.listed(rows, self.now, ranges)
        plan = plan_takes(
            views,
            me=host.name,
            limits=BalanceLimits(),
            rng=host.rng,
            held=set(host.held),
            by_load=self.by_load,
        )
        if ranges == [EVERYTHING] and (fresh_note := balance_note(views, host.name)) != note:
            run(self.store.note_balance(fresh_note))
        seen = [v for v in fresh if in_ranges(v.token, watched)]
        expired = expired_to_take(seen, plan.acquire)
        done = not expired
        for lease in [*plan.acquire, *expired]:
            got = run(self.store.acquire(lease, host.name))
            if got is not None:
                host.held[got.token] = got
                host.renewed_at[got.token] = self.now
            done = done and got is not None
        for lease in plan.steal:
            done = run(self.store.request_handover(lease, host.name)) is not None and done
        asking = any(v.lease.next_owner == host.name for v in views)
        host.settled = (
            done
            and plan.is_empty
            and not asking
            and is_settled(fresh, me=host.name, held=set(host.held))
        )
        return plan

    @rule(data=st.data())
    def renew_or_hand_over(self, data: st.DataObject) -> None:
        hosts = [h for h in self.live() if h.held]
        if not hosts:
            return
        host = data.draw(st.sampled_from(hosts))
        for token in list(host.held):
            if self.now - host.renewed_at[token] >= EXPIRY * 0.8:
                del host.held[token]  # self-fencing, as HeldLease.is_usable does
        self._renew_all(host)

    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        hosts = [h for h in self.live() if h.held]
        if not hosts:
            return
        host = data.draw(st.sampled_from(hosts))
        token = data.draw(st.sampled_from(sorted(host.held)))
        lease = host.held[token]
        nxt = self.progress.get(token, 0) + 1
        done = run(self.store.checkpoint(lease, str(nxt), caught_up=False, when=WHEN))
        if done is None:
            del host.held[token]
            return
        row = run(self.store.get(token))
        assert row is not None and row.epoch == lease.epoch and row.owner == host.name
        self.progress[token] = nxt
        host.held[token] = done

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        hosts = self.live()
        if len(hosts) > 1:
            data.draw(st.sampled_from(hosts)).alive = False

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """A crashed host comes back under the same name, remembering what it held before."""
        dead = [h for h in self.hosts.values() if not h.alive]
        if not dead:
            return
        host = data.draw(st.sampled_from(dead))
        host.stale.update(host.held)
        host.held.clear()
        host.alive = True
        host.view, host.settled, host.full_at = TableView.empty(EXPIRY), False, None
        self._tick(host)  # its first tick takes back what the table still shows as its own

    @rule(data=st.data())
    def zombie_checkpoint(self, data: st.DataObject) -> None:
        """A paused host wakes up, or a restarted one uses a snapshot from before its restart."""
        snapshots = [
            (host, lease)
            for host in self.hosts.values()
            for lease in (*host.stale.values(), *([] if host.alive else host.held.values()))
        ]
        if not snapshots:
            return
        host, lease = data.draw(st.sampled_from(snapshots))
        row = run(self.store.get(lease.token))
        assert row is not None
        result = run(self.store.checkpoint(lease, "999999", caught_up=False, when=WHEN))
        if row.owner != host.name or row.epoch != lease.epoch:
            assert result is None, "a checkpoint from a stale epoch landed"
        elif result is not None:
            self.progress[lease.token] = 999999

    @rule(seconds=st.floats(0.5, 2 * EXPIRY))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def one_holder_per_epoch(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for host in self.hosts.values():
            for token, lease in host.held.items():
                key = (token, lease.epoch)
                assert key not in seen, f"{key} held by {seen[key]} and {host.name}"
                seen[key] = host.name

    @invariant()
    def continuations_never_go_back(self) -> None:
        for row in run(self.store.list_leases()):
            assert int(row.continuation or 0) == self.progress.get(row.token, 0)

    def teardown(self) -> None:
        hosts = self.live()
        if not hosts:
            return
        for _ in range(8):  # quiet rounds: time passes, everyone renews, hands over and ticks
            self.now += EXPIRY
            for host in hosts:
                for token in list(host.held):
                    host.renewed_at[token] = self.now - 1
            for host in hosts:
                self._renew_all(host)
                self._tick(host)
        rows = run(self.store.list_leases())
        names = {h.name for h in hosts}
        assert all(r.owner in names for r in rows), [(r.token, r.owner) for r in rows]
        if self.by_load is not None:
            for host in hosts:  # settled: nobody asks for anything more
                assert self._tick(host).is_empty, [(r.token, r.owner, r.load) for r in rows]
            return
        counts = [sum(1 for r in rows if r.owner == n) for n in names]
        assert max(counts) - min(counts) <= 1, counts

    def _renew_all(self, host: SimHost) -> None:
        for token, lease in list(host.held.items()):
            renewed = run(self.store.renew(lease, load=self.rates[token]))
            if renewed is None:
                del host.held[token]
            elif renewed.next_owner not in (None, host.name):
                run(self.store.release(renewed))
                del host.held[token]
            else:
                host.held[token], host.renewed_at[token] = renewed, self.now


# 150 runs of up to 40 steps: ~10 s on 2 cores; raise max_examples locally for a longer search
LeaseProtocol.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestLeaseProtocol = LeaseProtocol.TestCase
