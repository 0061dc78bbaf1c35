"""Stealing a lease: the one operation that moves a lease away from a live owner. Its three steps:

1. **Ask** (`HandOverRequests.ask`). A host under its target writes itself into the lease's
   `next_owner`; the owner keeps the lease for now.
2. **Hand over.** The owner sees the request in the snapshot of its next renewal or checkpoint
   (`HeldLease.handover`, held_lease.py), stops after the batch in hand with `HANDED_OVER`,
   checkpoints, and releases the lease (`let_go`, release.py). The release keeps `next_owner`,
   so the balancing plan leaves the free lease to the host that asked.
3. **Take.** The asker acquires the free lease at its next tick (`LeaseTaker.take`, taking.py).
   An owner that keeps renewing without letting go has the lease taken by force once the request
   is `handover_timeout_s` old (`HandOverRequests.overdue`).

Which leases to steal is the balancer's decision (`plan_takes`); this module only carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from leases import HostId, Lease, LeaseStore, LeaseView
from processor.clock import Clock

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


class HandOverRequests:
    """The hand-overs this host asked for, and when: steps 1 and 3 of a steal."""

    def __init__(self, store: LeaseStore, *, me: HostId, clock: Clock) -> None:
        self._store, self._me, self._clock = store, me, clock
        self._asked_at: dict[str, float] = {}

    @property
    def pending(self) -> bool:
        return bool(self._asked_at)

    async def ask(self, lease: Lease) -> bool:
        """Step 1. False when the lease changed owner or epoch since the listing, or another host
        asked first."""
        if await self._store.request_handover(lease, self._me) is None:
            return False
        self._asked_at[lease.token] = self._clock.monotonic()
        log.info("lease.handover_requested", lease=lease.token, owner=lease.owner)
        return True

    def answered(self, lease: Lease) -> None:
        """The lease was acquired (handed over or forced): the request is done."""
        self._asked_at.pop(lease.token, None)

    def overdue(self, views: list[LeaseView], *, after_s: float) -> list[Lease]:
        """Step 3's fallback: the leases asked for `after_s` ago or longer and still not handed
        over, to take by force; requests no longer pending are forgotten."""
        forced, self._asked_at = overdue_requests(
            views, self._asked_at, me=self._me, now=self._clock.monotonic(), after_s=after_s
        )
        return forced
