"""Publishing this host's row in the lease table, so that `cfp status` shows every host.

The row is written at every state change and every `every_s` (a heartbeat `cfp status` judges
against the host's expiry). A host that stops cleanly deletes its row; one that fails
permanently leaves it, error included, for the operator. Rows of hosts silent for longer than
`FORGET_AFTER_S` are removed by whichever host notices.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from leases import HostId, HostReport, HostRows, LeaseError
from processor.clock import Clock
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.health.lifecycle import HostState, Lifecycle
from processor.waiting import wait_any

log = structlog.get_logger("cfp.presence")

FORGET_AFTER_S = 3600.0
# Publishes between looks for rows to forget, at least: each look lists every host row, so a
# host waits as many publishes as it saw rows, and the processor as a whole lists the host rows
# about once per publish interval however many hosts it has (not hosts x hosts rows).
FORGET_EVERY = 30


class Presence:
    def __init__(
        self,
        store: HostRows,
        *,
        name: HostId,
        lifecycle: Lifecycle,
        leases: LeaseRecorder,
        clock: Clock,
        expiry_s: float,
        outage: Callable[[], str] = lambda: "",
    ) -> None:
        self._store = store
        self._name = name
        self._lifecycle = lifecycle
        self._leases = leases
        self._clock = clock
        self._expiry_s = expiry_s
        self.endpoint = ""  # set by `run`: where the host serves /status
        self._outage = outage  # what the observer cannot write to now ("": nothing)
        self.note = ""  # set by the host: why it holds nothing yet
        self._changed = asyncio.Event()
        self._since = clock.wall()
        lifecycle.listeners.append(self._on_change)

    def _on_change(self, _: HostState) -> None:
        self._since = self._clock.wall()
        self._changed.set()

    def report(self) -> HostReport:
        return HostReport(
            name=self._name,
            state=self._lifecycle.state.value,
            since=self._since,
            seen=self._clock.wall(),
            leases=len(self._leases.entries),
            expiry_s=self._expiry_s,
            error=self._lifecycle.error,
            endpoint=self.endpoint,
            stuck={str(k): v for k, v in self._leases.stuck().items()},
            note=self.note,
            outage=self._outage(),
            freshness=self._leases.ages.percentiles(),
        )

    async def run(self, stop: asyncio.Event, *, every_s: float, endpoint: str = "") -> None:
        """Publish until `stop`; store errors are logged at debug level (the balancer reports
        the store's health)."""
        self.endpoint = endpoint or self.endpoint
        next_look = 0  # publishes until the next look for rows to forget
        while not stop.is_set():
            self._changed.clear()
            await self.publish()
            if next_look <= 0:
                next_look = max(FORGET_EVERY, await self._forget_silent())
            next_look -= 1
            await wait_any(stop, self._changed, timeout_s=every_s)

    async def publish(self) -> None:
        try:
            await self._store.publish_host(self.report())
        except LeaseError as e:
            log.debug("presence.failed", error=str(e))

    async def finish(self, *, timeout_s: float) -> None:
        """The last word: delete the row after a clean stop, else write the final state."""
        with contextlib.suppress(LeaseError, TimeoutError):
            async with asyncio.timeout(timeout_s):
                if self._lifecycle.state is HostState.STOPPED:
                    await self._store.delete_host(self._name)
                else:
                    await self._store.publish_host(self.report())

    async def _forget_silent(self) -> int:
        """Delete the rows of hosts silent for long; returns how many host rows there were."""
        try:
            reports = await self._store.list_hosts()
            now = self._clock.wall()
            for r in reports:
                if r.name != self._name and r.silent_s(now) > FORGET_AFTER_S:
                    await self._store.delete_host(r.name)
                    log.info("presence.forgotten", other=r.name, silent_s=r.silent_s(now))
        except LeaseError as e:
            log.debug("presence.failed", error=str(e))
            return 0
        return len(reports)
