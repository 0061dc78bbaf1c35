"""Acquiring leases: every write that makes this host a lease's owner.

`LeaseTaker` carries out a balancing tick's plan (which leases to take is the balancer's
decision): it acquires the free, expired and handed-over leases and starts their workers, asks
for the steals (stealing.py), and takes by force the hand-overs refused too long. `take_job_lease`
is the same step for a singleton job's own lease.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog

from leases import (
    ExpiryTracker,
    HostId,
    Lease,
    LeaseError,
    LeaseStore,
    LeaseTable,
    LeaseToken,
    LeaseView,
    TakePlan,
)
from processor.clock import Clock
from processor.host.health.host_progress import BalancingRecorder
from processor.host.leasing.stealing import HandOverRequests

log = structlog.get_logger("cfp.balancer")


class StartsWorkers(Protocol):
    """Where an acquired lease's worker starts (the host's `WorkerSupervisor`)."""

    def start(self, lease: Lease) -> bool:
        """False when no worker will run it."""
        ...


class LeaseTaker:
    def __init__(
        self,
        store: LeaseStore,
        supervisor: StartsWorkers,
        *,
        me: HostId,
        clock: Clock,
        counts: BalancingRecorder,
    ) -> None:
        self._store, self._supervisor, self._me = store, supervisor, me
        self._counts = counts
        self.requests = HandOverRequests(store, me=me, clock=clock)

    @property
    def asking(self) -> bool:
        """A hand-over this host asked for is still pending."""
        return self.requests.pending

    def overdue(self, views: list[LeaseView], *, after_s: float) -> list[Lease]:
        return self.requests.overdue(views, after_s=after_s)

    async def carry_out(
        self, plan: TakePlan, forced: list[Lease], *, tick: int, stop: asyncio.Event
    ) -> bool:
        """Acquire what the plan and the overdue hand-overs say, then ask for the steals. False
        when a write lost its race (the table changed since the listing)."""
        done = True
        for lease in (*plan.acquire, *forced):
            if stop.is_set():
                return done
            done = await self.take(lease, forced=lease in forced, tick=tick) and done
        for lease in plan.steal:
            if stop.is_set():
                return done
            done = await self.requests.ask(lease) and done
        return done

    async def take(self, lease: Lease, *, forced: bool, tick: int) -> bool:
        """Acquire `lease` and start its worker (nothing when another host was faster, or the
        owner wrote: the next tick decides)."""
        got = await self._store.acquire(lease, self._me)
        if got is None:
            return False
        self.requests.answered(lease)
        self._counts.acquired.inc()
        if lease.owner not in (None, self._me):
            self._counts.stolen.inc()
        log.info(
            "lease.acquired",
            lease=got.token,
            epoch=got.epoch,
            was=lease.owner,
            forced=forced,
            tick=tick,  # the balancer's tick count: how soon, counted in its own ticks
        )
        if not self._supervisor.start(got):
            await self._release_unrun(got)
            return False
        return True

    async def _release_unrun(self, got: Lease) -> None:
        """Let go of a lease acquired that no worker will run: the host is stopping, or a
        worker of its earlier hold is still ending (the lease expired under a busy host, which
        took it again). Kept, it would stay this host's, renewed by nobody, until it expired."""
        try:
            released = await self._store.release(got)
        except LeaseError as e:
            log.warning("lease.release_failed", lease=got.token, error=str(e))
            return
        log.info("lease.released_unrun", lease=got.token, released=released is not None)

    async def take_handed_over(self, leases: list[Lease], *, tick: int) -> None:
        """While paused, leases stay where they are, idle; renewals go on. A hand-over already
        under way completes (its owner released the lease to us), so that no lease is left
        free."""
        for lease in leases:
            if lease.owner is None and lease.next_owner == self._me and not lease.parked:
                await self.take(lease, forced=False, tick=tick)


async def take_job_lease(
    store: LeaseTable,
    token: LeaseToken,
    me: HostId,
    *,
    tracker: ExpiryTracker,
    now: float,
    force: bool = False,
) -> tuple[Lease | None, Lease | None]:
    """Take a singleton job's lease when it is free, ours from before, or expired on this host's
    clock (`force`: already judged so by the caller), creating its row the first time (the first
    host wins). The lease acquired (None: not taken) and the row as it was seen."""
    row = await store.get(token)
    if row is None:
        row = await store.create_if_absent(token, None)
        if row is None:
            return None, None  # another host made it just now: look again next time
    view = tracker.observe([row], now)[0]
    if row.owner is not None and row.owner != me and not (view.is_expired or force):
        return None, row
    return await store.acquire(row, me), row
