"""Stealing a lease, its three steps read in one module: ask, hand over, take; and the forced
take of a hand-over refused too long."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from leases import HostId, Lease, LeaseToken, LeaseView, MemoryLeaseStore
from processor.host.health.host_progress import BalancingRecorder
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.release import let_go
from processor.host.leasing.stealing import overdue_requests
from processor.host.leasing.taking import LeaseTaker
from tests import patience
from tests.unit.fakes import ManualClock

OWNER, TAKER = HostId("h1"), HostId("h2")


class Started:
    def __init__(self) -> None:
        self.leases: list[Lease] = []

    def start(self, lease: Lease) -> bool:
        self.leases.append(lease)
        return True


async def owned() -> tuple[MemoryLeaseStore, ManualClock, HeldLease]:
    store, clock = MemoryLeaseStore(), ManualClock()
    row = await store.create_if_absent(LeaseToken("00"), None)
    assert row is not None
    got = await store.acquire(row, OWNER)
    assert got is not None
    return store, clock, HeldLease(got, clock=clock, fence_after_s=20)


def taker(store: MemoryLeaseStore, clock: ManualClock) -> tuple[LeaseTaker, Started]:
    started = Started()
    counts = BalancingRecorder(CollectorRegistry())
    return LeaseTaker(store, started, me=TAKER, clock=clock, counts=counts), started


async def row(store: MemoryLeaseStore) -> Lease:
    found = await store.get(LeaseToken("00"))
    assert found is not None
    return found


async def test_a_steal_asks_the_owner_hands_over_and_the_asker_takes_it() -> None:
    store, clock, held = await owned()
    taking, started = taker(store, clock)

    assert await taking.requests.ask(await row(store))  # 1. ask
    assert taking.asking and not held.handover.is_set()
    assert await held.renew(store) is not None and held.handover.is_set()  # seen at a renewal
    released = await let_go(held, store, timeout_s=patience.left_s())  # 2. hand over
    assert released is not None and released.owner is None and released.next_owner == TAKER
    assert await taking.take(await row(store), forced=False, tick=1)  # 3. take
    assert [(x.owner, x.epoch) for x in started.leases] == [(TAKER, 2)] and not taking.asking


async def test_an_owner_that_keeps_renewing_has_its_lease_taken_only_once_the_wait_is_over() -> (
    None
):
    store, clock, held = await owned()
    taking, started = taker(store, clock)
    assert await taking.requests.ask(await row(store))
    clock.now += 29
    assert await held.renew(store) is not None
    assert taking.overdue([LeaseView(await row(store))], after_s=30) == []
    clock.now += 1
    forced = taking.overdue([LeaseView(await row(store))], after_s=30)
    assert [x.token for x in forced] == ["00"]
    assert await taking.take(forced[0], forced=True, tick=2)
    assert started.leases[0].owner == TAKER and await held.renew(store) is None and held.is_lost


owners = st.sampled_from([None, "me", "h2", "h3"])
rows = st.lists(
    st.tuples(owners, st.sampled_from([None, "me", "h2"]), st.one_of(st.none(), st.floats(0, 100))),
    max_size=12,
)


@given(rows, st.floats(0, 200))
def test_a_hand_over_is_forced_only_when_asked_long_enough_and_still_refused(
    table: list[tuple[str | None, str | None, float | None]], now: float
) -> None:
    views = [
        LeaseView(Lease(LeaseToken(f"{i:02}"), owner=o, next_owner=n))  # type: ignore[arg-type]
        for i, (o, n, _) in enumerate(table)
    ]
    asked = {f"{i:02}": t for i, (_, _, t) in enumerate(table) if t is not None}
    forced, still = overdue_requests(views, asked, me=HostId("me"), now=now, after_s=30)
    for v in views:
        pending = v.token in asked and v.lease.next_owner == "me" and v.owner not in (None, "me")
        assert (v.token in still) == pending  # a request answered or dropped is forgotten
        assert (v.lease in forced) == (pending and now - asked[v.token] >= 30)
