"""Which other hosts are alive, from their rows: what a host counts before it takes free leases,
so that hosts started together share the leases from their first ticks (the lease owners alone
show only the hosts that already took some).

A row is written by its host every balancing tick, stamped with that host's own wall clock. A
clock may be minutes off, so a row is judged by whether it changes, on the judge's own clock:
alive when its stamp changed within the last expiry. A row seen for the first time is judged by
its stamp (as far as two clocks can tell), once. `update` decides (no I/O); `look` lists the
rows first.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import structlog

from leases.errors import LeaseError
from leases.record import HostId
from leases.reserved_rows import HostReport
from leases.store.lease_store import HostRows

log = structlog.get_logger("cfp.balance")

# the states of a host that works, or is about to (the processor's lifecycle names)
LIVE_STATES = frozenset({"starting", "running", "paused"})


class PeerLiveness:
    def __init__(self, me: HostId, *, window_s: float) -> None:
        self.me = me
        self.window_s = window_s
        self._seen: dict[HostId, tuple[datetime, float]] = {}  # row stamp, when it last changed

    def update(
        self, rows: Iterable[HostReport], *, now: float, wall: datetime
    ) -> frozenset[HostId]:
        """The other live hosts, from a listing of the host rows at monotonic time `now`
        (`wall`: this host's wall clock)."""
        live: set[HostId] = set()
        listed: set[HostId] = set()
        for row in rows:
            if row.name == self.me:
                continue
            listed.add(row.name)
            window = max(self.window_s, row.expiry_s)
            known = self._seen.get(row.name)
            if known is None:  # first sight: its stamp's word
                changed = now if row.silent_s(wall) <= window else now - window - 1.0
            elif known[0] != row.seen:
                changed = now
            else:
                changed = known[1]
            self._seen[row.name] = (row.seen, changed)
            if row.state in LIVE_STATES and now - changed <= window:
                live.add(row.name)
        for gone in set(self._seen) - listed:
            del self._seen[gone]
        return frozenset(live)

    async def look(self, store: HostRows, *, now: float, wall: datetime) -> frozenset[HostId]:
        """`update` from a fresh listing of the host rows; none when the store did not answer
        (the balancer then plans as if alone, as before it knew of rows)."""
        try:
            rows = await store.list_hosts()
        except LeaseError as e:
            log.debug("balance.hosts_unlisted", error=str(e))
            return frozenset()
        return self.update(rows, now=now, wall=wall)
