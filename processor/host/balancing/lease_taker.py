"""The writes a balancing tick makes to take leases: acquire one (then start its worker), or ask
its owner for a hand-over and remember when, so that a request refused for too long is taken by
force (`overdue_requests`). Which leases to take is the balancer's decision."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog

from leases import HostId, Lease, LeaseError, LeaseStore, LeaseView, TakePlan
from processor.clock import Clock
from processor.host.health.host_progress import BalancingRecorder
from processor.host.ownership.worker_supervisor import WorkerSupervisor

log = structlog.get_logger("cfp.balancer")


def overdue_requests(
    views: list[LeaseView], asked_at: Mapping[str, float], *, me: HostId, now: float, after_s: float
) -> tuple[list[Lease], dict[str, float]]:
    """Leases this host asked for at least `after_s` ago whose owner keeps renewing them without
    letting go (taken by force), and the requests still open (those no longer pending dropped)."""
    overdue: list[Lease] = []
    still: dict[str, float] = {}
    for v in views:
        asked = asked_at.get(v.token)
        if asked is None or v.lease.next_owner != me or v.owner in (None, me):
            continue
        still[v.token] = asked
        if now - asked >= after_s:
            overdue.append(v.lease)
    return overdue, still


class LeaseTaker:
    def __init__(
        self,
        store: LeaseStore,
        supervisor: WorkerSupervisor,
        *,
        me: HostId,
        clock: Clock,
        counts: BalancingRecorder,
    ) -> None:
        self._store, self._supervisor, self._me = store, supervisor, me
        self._clock, self._counts = clock, counts
        self._asked_at: dict[str, float] = {}  # hand-overs this host requested, and when

    @property
    def asking(self) -> bool:
        """A hand-over this host asked for is still pending."""
        return bool(self._asked_at)

    def overdue(self, views: list[LeaseView], *, after_s: float) -> list[Lease]:
        """The leases asked for `after_s` ago or longer and still not handed over; requests no
        longer pending are forgotten."""
        forced, self._asked_at = overdue_requests(
            views, self._asked_at, me=self._me, now=self._clock.monotonic(), after_s=after_s
        )
        return forced

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
            if await self._store.request_handover(lease, self._me) is not None:
                self._asked_at[lease.token] = self._clock.monotonic()
                log.info("lease.handover_requested", lease=lease.token, owner=lease.owner)
            else:
                done = False
        return done

    async def take(self, lease: Lease, *, forced: bool, tick: int) -> bool:
        """Acquire `lease` and start its worker (nothing when another host was faster, or the
        owner wrote: the next tick decides)."""
        got = await self._store.acquire(lease, self._me)
        if got is None:
            return False
        self._asked_at.pop(lease.token, None)
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
