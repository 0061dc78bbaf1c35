"""The chaos run's zombie with a write in flight, on the tables in Azurite through the fault proxy.

Before the storm, the first host starts alone, with its second Spark write held inside Spark (its
Delta transaction open: `CFP_TEST_SPARK_HOLD_WRITE_FILE`); alone, it owns every lease and writes.
It is stopped with SIGSTOP while the write is held, the other hosts start, and it is woken with
SIGCONT only once they own its leases and have committed their fences. Delta must refuse the held
append (the fence landed while it was in flight), the host must log `spark.fenced`, and the run's
invariants (each event once in the change log, `cfp verify`) must still hold.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from leases import TableLeaseStore
from tests.chaos.invariants import Delivery

FENCE_EVENTS = ("spark.fence_committed", "spark.synced")
POLL_S = 0.25


class ChaosHosts(Protocol):
    """What the zombie needs of the runner's hosts."""

    def name(self, i: int) -> str: ...
    def is_up(self, i: int) -> bool: ...
    def start(self, i: int, *, skew_s: float = 0.0, hold: Path | None = None) -> None: ...
    def signal(self, i: int, sig: signal.Signals) -> None: ...
    def logged(self, *events: str) -> list[dict[str, object]]: ...


@dataclass(frozen=True)
class Zombie:
    """A host paused with a write in flight: its name, the leases it held (taken and fenced by
    others before it was woken), and its `spark.fenced` lines before."""

    host: str
    leases: tuple[str, ...]
    fenced_before: int
    paused_mono: float = 0.0  # CLOCK_MONOTONIC when it was paused (the hosts' `mono` clock)
    paused_at: datetime | None = None

    def staged(
        self, deliveries: list[Delivery], logged: Callable[..., list[dict[str, object]]]
    ) -> int:
        """The events it delivered before it was paused and did not commit: delivered again by
        the next owners by design (its write in flight must be refused, not land)."""
        delivered = sum(
            d.events for d in deliveries if d.host == self.host and d.mono < self.paused_mono
        )
        committed = sum(
            int(str(e.get("appended", 0)))
            for e in logged("spark.committed")
            if e.get("host") == self.host
            and self.paused_at is not None
            and datetime.fromisoformat(str(e["timestamp"]).replace("Z", "+00:00")) < self.paused_at
        )
        return max(0, delivered - committed)

    def problems(self, logged: Callable[..., list[dict[str, object]]]) -> list[str]:
        """Its write in flight must have been refused by Delta, and said so."""
        fenced = [e for e in logged("spark.fenced") if e.get("host") == self.host]
        refused = [e for e in fenced[self.fenced_before :] if "in flight" in str(e.get("error"))]
        if refused:
            return []
        return [
            f"{self.host}, paused with a Spark write in flight and woken after its leases "
            f"{list(self.leases)} were fenced by other hosts, never logged spark.fenced for it "
            f"(its spark.fenced lines: {fenced[self.fenced_before :]})"
        ]


async def start_with_a_zombie(
    hosts: ChaosHosts,
    store: TableLeaseStore,
    workdir: Path,
    *,
    count: int,
    patience_s: float,
    note: Callable[[str], None],
) -> Zombie | None:
    """Start the `count` hosts, the first of them made a zombie (None: it did not write twice
    within `patience_s`, noted). Returns once it is woken; `Zombie.problems` checks it later."""
    name = hosts.name(0)
    flag = workdir / f"zombie-{name}"
    hosts.start(0, hold=flag)
    note(f"zombie: {name} started alone, its second Spark write to be held in flight")
    paused = False
    try:
        if not await _within(patience_s, Path(f"{flag}.held").exists):
            note(f"zombie: {name} wrote nothing twice in {patience_s:g}s; none made")
            return None
        held = tuple(sorted(x.token for x in await store.list_leases() if x.owner == name))
        fenced_before = sum(1 for e in hosts.logged("spark.fenced") if e.get("host") == name)
        fences_before = _fences(hosts)
        hosts.signal(0, signal.SIGSTOP)
        paused_mono, paused_at = time.monotonic(), datetime.now(UTC)
        paused = True
        note(f"zombie: {name} paused with its write in flight (leases {list(held)})")
        for i in range(1, count):
            hosts.start(i)

        async def fenced_by_others() -> bool:
            leases = {x.token: x.owner for x in await store.list_leases()}
            now = _fences(hosts)
            return all(leases.get(t) not in (None, name) for t in held) and all(
                now[t] > fences_before[t] for t in held
            )

        if not await _within(patience_s, fenced_by_others):
            note(f"zombie: {name}'s leases were not all taken and fenced in {patience_s:g}s")
        return Zombie(name, held, fenced_before, paused_mono, paused_at)
    finally:
        flag.touch()  # the held write goes on to its commit
        if paused:
            hosts.signal(0, signal.SIGCONT)
            note(f"zombie: {name} woken")
        for i in range(1, count):
            if not hosts.is_up(i):
                hosts.start(i)


def _fences(hosts: ChaosHosts) -> Counter[str]:
    """Fences committed (or syncs done) so far, per lease, by any host."""
    return Counter(str(e.get("lease")) for e in hosts.logged(*FENCE_EVENTS))


async def _within(seconds: float, check: Callable[[], bool | Awaitable[bool]]) -> bool:
    """Poll `check` until it holds (True) or `seconds` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found if isinstance(found, bool) else await found:
            return True
        await asyncio.sleep(POLL_S)
    return False
