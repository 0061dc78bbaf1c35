"""A paused processor's balancing tick: nothing moves, but a hand-over under way completes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from leases import HostId, LeaseToken, MemoryLeaseStore, ProcessorState
from processor.balancer import Balancer
from processor.clock import SystemClock
from processor.positions import PositionBook
from processor.supervisor import WorkerSupervisor
from processor.timings import derive_timings


class NoFeed:
    """A catalog of an empty feed: the tick creates no feed lease."""

    async def segments(self, **_: object) -> list[str]:
        return []

    async def shard_names(self, segments: list[str], **_: object) -> set[str]:
        return set()


async def test_a_paused_tick_takes_only_a_lease_handed_to_it() -> None:
    store = MemoryLeaseStore()
    me, other = HostId("h2"), HostId("h1")
    for token in ("00", "01"):
        row = await store.create_if_absent(LeaseToken(token), None)
        assert row is not None
        held = await store.acquire(row, other)
        assert held is not None
        if token == "00":  # h2 asked for 00; h1 handed it over, then the processor was paused
            asked = await store.request_handover(held, me)
            assert asked is not None
            held = asked
        assert await store.release(held) is not None
    await store.set_processor_state(ProcessorState(paused=True))

    started: list[str] = []
    supervisor = WorkerSupervisor(
        lambda held: asyncio.sleep(0), clock=SystemClock(), fence_after_s=9
    )
    supervisor.start = lambda lease: started.append(lease.token) or True  # type: ignore[method-assign]
    balancer = Balancer(
        store=store,
        catalog=NoFeed(),  # type: ignore[arg-type]
        supervisor=supervisor,
        book=PositionBook(store.list_leases, refresh_s=1),
        me=me,
        timings=derive_timings(3.0),
        clock=SystemClock(),
    )
    balancer._tracker = SimpleNamespace()  # type: ignore[assignment]  # a paused tick plans nothing
    await balancer.tick()

    rows = {x.token: x.owner for x in await store.list_leases()}
    assert rows == {"00": "h2", "01": None}  # the hand-over completed; the free lease stays free
    assert started == ["00"] and balancer.paused
