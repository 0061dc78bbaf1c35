"""The balancing tick's own decisions: the caught-up check, a paused tick, why a host is idle."""

from __future__ import annotations

from leases import (
    HostId,
    Lease,
    LeaseToken,
    LeaseView,
    MemoryLeaseStore,
    ProcessorState,
    TakePlan,
)
from processor.host.balancing.balancer import nothing_left, why_idle
from tests.unit.balancers import FixedFeed
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


def test_nothing_is_left_when_every_lease_is_caught_up_parked_or_stalled() -> None:
    leases = [
        Lease(LeaseToken("00"), caught_up=True),
        Lease(LeaseToken("01"), parked=True),
        Lease(LeaseToken("02")),
    ]
    assert not nothing_left(leases)
    assert nothing_left(leases, stalled={"02"})
    assert nothing_left([])


async def test_a_shard_named_like_a_reserved_row_gets_no_lease() -> None:
    """Host rows live under "~" and scan partitions are scan-NN: a shard so named would
    collide with them, so it is logged and left out while the others get their leases."""
    store = MemoryLeaseStore()
    feed = FixedFeed(["idx/segments/2026/01/01/0000/meta.json"], {"00", "~host~x", "scan-01"})
    balancer, _ = make_balancer(store, "h1", feed)
    await balancer.tick()
    assert [x.token for x in await store.list_leases()] == ["00"]


def test_an_idle_host_says_why_it_holds_nothing() -> None:
    me = HostId("me")

    def view(token: str, owner: str | None, *, expired: bool = False) -> LeaseView:
        lease = Lease(LeaseToken(token), owner=HostId(owner) if owner else None)
        return LeaseView(lease, is_expired=expired)

    shared = [view("00", "h1"), view("01", "h2")]
    plan = TakePlan(target=1, hosts=3, mine=0)
    assert why_idle(shared, plan, me=me, finished=0, holding=0) == (
        "nothing to take: 2 leases held by 2 other hosts"
    )
    one = TakePlan(target=1, hosts=2, mine=0)
    assert why_idle(shared[:1], one, me=me, finished=0, holding=0) == (
        "nothing to take: 1 lease held by 1 other host"
    )
    assert why_idle(shared, plan, me=me, finished=0, holding=1) == ""
    silent = [view("00", "h1", expired=True), view("01", "h2")]
    assert "silent hosts to expire" in why_idle(silent, plan, me=me, finished=0, holding=0)
    assert why_idle([], plan, me=me, finished=3, holding=0) == "every lease has finished"
    assert "no shard" in why_idle([], plan, me=me, finished=0, holding=0)
    stealing = TakePlan(target=1, hosts=3, mine=0, steal=(shared[0].lease,))
    assert "asked for a hand-over" in why_idle(shared, stealing, me=me, finished=0, holding=0)
    asked = Lease(LeaseToken("00"), owner=HostId("h1"), next_owner=me)
    handing = [LeaseView(asked, is_expired=False), shared[1]]
    assert "hand-over to this host" in why_idle(handing, plan, me=me, finished=0, holding=0)
    taking = TakePlan(target=1, hosts=2, mine=0, acquire=(shared[0].lease,))
    assert why_idle(shared, taking, me=me, finished=0, holding=0) == ""


class CountingStore(MemoryLeaseStore):
    """A memory store that counts the balancer's listings: everything, or key ranges."""

    def __init__(self) -> None:
        super().__init__()
        self.full = 0
        self.ranges: list[tuple[str, str]] = []

    async def list_leases(self) -> list[Lease]:
        self.full += 1
        return await super().list_leases()

    async def list_range(self, lo: str, hi: str) -> list[Lease]:
        self.ranges.append((lo, hi))
        return await super().list_range(lo, hi)


async def test_a_settled_host_lists_its_slices_and_everything_again_once_it_acts() -> None:
    store = CountingStore()
    tokens = [LeaseToken(f"{i:02d}") for i in range(9)]
    for i, token in enumerate(tokens):  # three hosts hold three leases each
        created = await store.create_if_absent(token, None)
        assert created is not None
        assert await store.acquire(created, HostId(f"h{i % 3}")) is not None
    b, started = make_balancer(store, "h1", FixedFeed(["s"], set(tokens)))
    started += [t for i, t in enumerate(tokens) if i % 3 == 1]
    b.supervisor.tokens = lambda: set(started)  # type: ignore[method-assign]
    await b.tick()
    assert (store.full, store.ranges) == (1, [])  # the first tick lists everything
    await b.tick()
    assert store.full == 1 and store.ranges == [("03", "~")]  # h1 watches slices 1 and 2
    row = await store.get(tokens[3])  # h0's, in the slices h1 watches
    assert row is not None and await store.release(row) is not None
    await b.tick()  # h1, at its target, does not take it, but saw something free...
    assert store.full == 1 and len(store.ranges) == 2 and started[-1] != "03"
    await b.tick()  # ...so it lists everything again
    assert store.full == 2


async def test_a_lease_acquired_that_no_worker_will_run_is_released_at_once() -> None:
    """A busy host's lease expired under it and it took the lease again while the old worker was
    still ending (seen under load in make test): the supervisor refuses a second worker, and the
    acquisition must not stay the host's, renewed by nobody, until it expires."""
    store = MemoryLeaseStore()
    row = await store.create_if_absent(LeaseToken("00"), None)
    assert row is not None
    balancer, started = make_balancer(store, "h1")
    refuse = lambda lease: started.append(lease.token) and False  # noqa: E731
    balancer._taker._supervisor.start = refuse  # type: ignore[method-assign]
    await balancer.tick()
    assert started == ["00"]  # acquired, then refused a worker
    [lease] = await store.list_leases()
    assert lease.owner is None and lease.epoch == 1  # released, its acquisition's epoch kept
