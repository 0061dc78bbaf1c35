"""A paused processor's balancing tick: nothing moves, but a hand-over under way completes."""

from __future__ import annotations

from leases import HostId, LeaseToken, MemoryLeaseStore, ProcessorState
from tests.unit.balancers import balancer as make_balancer


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

    balancer, started = make_balancer(store, me)
    await balancer.tick()

    rows = {x.token: x.owner for x in await store.list_leases()}
    assert rows == {"00": "h2", "01": None}  # the hand-over completed; the free lease stays free
    assert started == ["00"] and balancer.paused
