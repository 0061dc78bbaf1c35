"""The lease store contract, run against both stores: the memory one and Azure Tables (Azurite)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest
from azure.data.tables.aio import TableClient

from leases import (
    Delivered,
    HostId,
    HostReport,
    Lease,
    LeaseMove,
    LeaseStoreUnavailable,
    LeaseToken,
    MemoryLeaseStore,
    ProcessorState,
    job_name,
    job_token,
)
from leases.store.lease_store import ConditionalLeaseStore
from leases.store.table_lease_store import TableLeaseStore
from processor.emulator.azurite import Azurite

A, B, C = HostId("host-a"), HostId("host-b"), HostId("host-c")
T0 = LeaseToken("00")
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
_names = itertools.count()

StoreFactory = Callable[[], Awaitable[ConditionalLeaseStore]]


@pytest.fixture(params=["memory", "table"])
async def stores(request: pytest.FixtureRequest, azurite: Azurite) -> AsyncIterator[StoreFactory]:
    """A factory of store clients that all see the same leases (one processor, fresh per test)."""
    processor = f"proc{next(_names)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
    opened: list[TableLeaseStore] = []
    memory = MemoryLeaseStore()

    async def make() -> ConditionalLeaseStore:
        if request.param == "memory":
            return memory
        store = TableLeaseStore.from_connection_string(
            azurite.connection_string, table="cfpleasestest", processor=processor
        )
        opened.append(store)
        return await store.open()

    yield make
    for s in opened:
        await s.close()


async def _owned(store: ConditionalLeaseStore, owner: HostId) -> Lease:
    created = await store.create_if_absent(T0, None)
    assert created is not None
    held = await store.acquire(created, owner)
    assert held is not None
    return held


async def test_two_hosts_creating_the_same_lease_one_wins(stores: StoreFactory) -> None:
    a, b = await stores(), await stores()
    results = await asyncio.gather(
        a.create_if_absent(T0, '{"x":1}'), b.create_if_absent(T0, '{"x":2}')
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    rows = await a.list_leases()
    assert [r.token for r in rows] == [T0]
    assert rows[0].continuation == winners[0].continuation
    assert rows[0].owner is None and rows[0].epoch == 0


async def test_two_hosts_acquiring_the_same_free_lease_one_wins(stores: StoreFactory) -> None:
    a, b = await stores(), await stores()
    free = await a.create_if_absent(T0, None)
    assert free is not None
    got = await asyncio.gather(a.acquire(free, A), b.acquire(free, B))
    winners = [g for g in got if g is not None]
    assert len(winners) == 1
    row = await a.get(T0)
    assert row is not None and row.owner == winners[0].owner and row.epoch == 1


async def test_a_stale_etag_is_refused(stores: StoreFactory) -> None:
    store = await stores()
    free = await store.create_if_absent(T0, None)
    assert free is not None
    held = await store.acquire(free, A)
    assert held is not None
    assert await store.acquire(free, B) is None  # decided on a snapshot that changed since
    assert await store.request_handover(free, B) is None
    row = await store.get(T0)
    assert row is not None and row.owner == A and row.next_owner is None


async def test_checkpoint_by_a_non_owner_or_an_old_epoch_is_refused(stores: StoreFactory) -> None:
    store = await stores()
    held_a = await _owned(store, A)
    ok = await store.checkpoint(held_a, "pos-1", caught_up=False, when=WHEN)
    assert ok is not None and ok.continuation == "pos-1"
    stolen = await store.acquire(ok, B)
    assert stolen is not None and stolen.epoch == held_a.epoch + 1
    # A still thinks it holds epoch 1: refused, with a fresh row or with its stale one
    assert await store.checkpoint(ok, "pos-zombie", caught_up=False, when=WHEN) is None
    assert await store.renew(ok) is None
    assert await store.release(ok) is None
    # same owner name, old epoch (the host lost it and got it back): still refused
    back = await store.acquire(stolen, A)
    assert back is not None and back.epoch == held_a.epoch + 2
    assert await store.checkpoint(ok, "pos-old-epoch", caught_up=False, when=WHEN) is None
    row = await store.get(T0)
    assert row is not None and row.continuation == "pos-1" and row.owner == A


async def test_release_keeps_the_continuation(stores: StoreFactory) -> None:
    store = await stores()
    held = await _owned(store, A)
    done = await store.checkpoint(held, "pos-7", caught_up=True, when=WHEN)
    assert done is not None
    released = await store.release(done)
    assert released is not None and released.owner is None
    row = await store.get(T0)
    assert row is not None
    assert (row.owner, row.continuation, row.caught_up) == (None, "pos-7", True)
    assert row.checkpoint_time == WHEN


async def test_a_parked_lease_keeps_its_position_until_moved_and_the_move_is_recorded(
    stores: StoreFactory,
) -> None:
    a, b = await stores(), await stores()
    held = await _owned(a, A)
    done = await a.checkpoint(held, "pos-3", caught_up=False, when=WHEN, dead_letters=2)
    assert done is not None and done.dead_letters == 2
    parked = await a.park(done, error="chunk x at byte 9: bad block")
    assert parked is not None
    row = await b.get(T0)
    assert row is not None
    assert (row.owner, row.parked, row.continuation) == (None, True, "pos-3")
    assert row.error == "chunk x at byte 9: bad block" and row.dead_letters == 2
    move = LeaseMove(WHEN, "pos-3", "pos-4", 1234, "bad block", row.error)
    assert await b.move(done, "pos-4", move) is None  # decided on a stale snapshot
    moved = await b.move(row, "pos-4", move)
    assert moved is not None
    again = await a.get(T0)
    assert again is not None
    assert (again.parked, again.error, again.continuation) == (False, "", "pos-4")
    assert again.moves == (move,) and again.dead_letters == 2
    # an owned lease is not moved or resumed by hand
    owned = await a.acquire(again, A)
    assert owned is not None
    assert await b.move(owned, "pos-9", move) is None
    assert await b.resume(owned) is None


async def test_a_parked_lease_can_be_resumed_where_it_stood(stores: StoreFactory) -> None:
    store = await stores()
    held = await _owned(store, A)
    parked = await store.park(held, error="observer failed")
    assert parked is not None and parked.parked
    resumed = await store.resume(parked)
    assert resumed is not None
    assert (resumed.parked, resumed.error, resumed.moves) == (False, "", ())
    assert resumed.continuation == held.continuation


async def test_epoch_grows_on_every_owner_change(stores: StoreFactory) -> None:
    store = await stores()
    lease = await store.create_if_absent(T0, None)
    assert lease is not None
    epochs = [lease.epoch]
    for owner in (A, B, C, A):
        nxt = await store.acquire(lease, owner)
        assert nxt is not None and nxt.owner == owner
        epochs.append(nxt.epoch)
        renewed = await store.renew(nxt)
        assert renewed is not None and renewed.epoch == nxt.epoch
        lease = renewed
    assert epochs == sorted(set(epochs))
    released = await store.release(lease)
    assert released is not None
    again = await store.acquire(released, B)
    assert again is not None and again.epoch == epochs[-1] + 1


async def test_a_handover_request_survives_the_owners_checkpoints(stores: StoreFactory) -> None:
    store = await stores()
    seen = await _owned(store, A)
    assert await store.checkpoint(seen, "pos-1", caught_up=False, when=WHEN) is not None
    asked = await store.request_handover(seen, B)  # the snapshot is stale; the owner is not
    assert asked is not None and asked.next_owner == B and asked.continuation == "pos-1"
    assert await store.request_handover(seen, C) is None  # B asked first
    taken = await store.acquire(asked, C)
    assert taken is not None
    assert await store.request_handover(seen, B) is None  # a new epoch: the request is void
    row = await store.get(T0)
    assert row is not None and row.owner == C and row.next_owner is None


async def test_owner_writes_survive_a_handover_request(stores: StoreFactory) -> None:
    store = await stores()
    held = await _owned(store, A)
    asked = await store.request_handover(held, B)
    assert asked is not None and asked.next_owner == B and asked.owner == A
    # the owner's snapshot is stale, but the row is still its own: the write is re-applied
    renewed = await store.checkpoint(held, "pos-9", caught_up=False, when=WHEN)
    assert renewed is not None and renewed.next_owner == B and renewed.continuation == "pos-9"
    released = await store.release(renewed)
    assert released is not None and released.owner is None and released.next_owner == B
    taken = await store.acquire(released, B)
    assert taken is not None and taken.next_owner is None and taken.continuation == "pos-9"


async def test_a_write_whose_reply_was_lost_is_judged_by_re_reading(
    stores: StoreFactory,
) -> None:
    store = await stores()
    held = await _owned(store, A)
    real_replace = store._replace
    lost = {"n": 0}

    async def replace_then_lose_reply(lease: Lease, etag: str) -> Lease | None:
        result = await real_replace(lease, etag)
        if lost["n"] < 1:
            lost["n"] += 1
            raise LeaseStoreUnavailable("reply lost")
        return result

    store._replace = replace_then_lose_reply  # type: ignore[method-assign]
    try:
        done = await store.checkpoint(held, "pos-3", caught_up=False, when=WHEN)
    finally:
        store._replace = real_replace  # type: ignore[method-assign]
    assert lost["n"] == 1
    assert done is not None and done.continuation == "pos-3"
    row = await store.get(T0)
    assert row is not None and row.version == held.version + 1  # applied exactly once


async def test_a_write_that_never_landed_is_tried_again(stores: StoreFactory) -> None:
    store = await stores()
    held = await _owned(store, A)
    real_replace = store._replace
    calls = {"n": 0}

    async def fail_before_sending(lease: Lease, etag: str) -> Lease | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise LeaseStoreUnavailable("connection refused")
        return await real_replace(lease, etag)

    store._replace = fail_before_sending  # type: ignore[method-assign]
    try:
        done = await store.renew(held)
    finally:
        store._replace = real_replace  # type: ignore[method-assign]
    assert calls["n"] == 2 and done is not None and done.version == held.version + 1


async def test_host_rows_and_the_processor_row_live_beside_the_leases(
    stores: StoreFactory,
) -> None:
    """Host rows and the processor row share the partition but never show up as leases; a
    missing processor row means not paused; a host row is replaced, listed and deleted."""
    a, b = await stores(), await stores()
    await _owned(a, A)
    assert (await b.processor_state()).paused is False
    await a.set_processor_state(ProcessorState(paused=True, since=WHEN, reason="upgrade"))
    state = await b.processor_state()
    assert (state.paused, state.reason, state.since) == (True, "upgrade", WHEN)
    for n in (1, 2):
        await a.publish_host(HostReport(A, "running", WHEN, WHEN, n, 30.0, endpoint="http://x"))
    await b.publish_host(HostReport(B, "draining", WHEN, WHEN, 0, 30.0, error="e"))
    hosts = sorted(await a.list_hosts(), key=lambda h: h.name)
    assert [(h.name, h.state, h.leases, h.error) for h in hosts] == [
        (A, "running", 2, ""),
        (B, "draining", 0, "e"),
    ]
    assert [x.token for x in await b.list_leases()] == [T0]  # only the lease
    await a.delete_host(B)
    await a.delete_host(B)  # deleting what is gone is fine
    assert [h.name for h in await b.list_hosts()] == [A]
    await a.set_processor_state(ProcessorState(paused=False, since=WHEN))
    assert (await b.processor_state()).paused is False


async def test_job_leases_are_listed_apart_and_written_like_leases(stores: StoreFactory) -> None:
    """A job's lease (`job_token`) shares the partition with the leases, host rows and the
    processor row, is listed only by `list_jobs`, and keeps the leases' write rules: one
    creator wins, a release keeps the continuation, a checkpoint of an old epoch is refused."""
    a, b = await stores(), await stores()
    await _owned(a, A)
    await a.publish_host(HostReport(A, "running", WHEN, WHEN, 1, 30.0))
    token = job_token("state")
    made = await a.create_if_absent(token, None)
    assert made is not None and await b.create_if_absent(token, None) is None
    held = await a.acquire(made, A)
    assert held is not None and await b.acquire(made, B) is None  # the ETag moved on
    done = await a.checkpoint(held, '{"applied": 3}', caught_up=True, when=WHEN)
    assert done is not None
    assert [x.token for x in await b.list_leases()] == [T0]
    [job] = await b.list_jobs()
    assert (job.token, job.owner, job.continuation) == (token, A, '{"applied": 3}')
    assert job.caught_up and job_name(job.token) == "state"
    released = await a.release(done)
    assert released is not None and released.owner is None
    taken = await b.acquire(released, B)
    assert taken is not None and (taken.epoch, taken.continuation) == (2, '{"applied": 3}')
    assert await a.checkpoint(done, "late", caught_up=False, when=WHEN) is None  # epoch 1
    assert (await a.get(token)) == taken


async def test_checkpoints_add_delivered_counters_past_32_bits(stores: StoreFactory) -> None:
    a, b = await stores(), await stores()
    held = await _owned(a, A)
    big = Delivered(events=3, event_bytes=2**40, last_event_time=WHEN)
    done = await a.checkpoint(held, "p1", caught_up=False, when=WHEN, delivered=big)
    assert done is not None
    later = Delivered(events=2, event_bytes=10)  # no event time: the last one is kept
    done = await a.checkpoint(done, "p2", caught_up=False, when=WHEN, delivered=later)
    row = await b.get(T0)
    assert row is not None
    assert (row.events, row.event_bytes, row.last_event_time) == (5, 2**40 + 10, WHEN)
    assert row.average_event_bytes() == (2**40 + 10) / 5


async def test_a_renewal_writes_the_read_rate_and_checkpoints_keep_it(stores: StoreFactory) -> None:
    a, b = await stores(), await stores()
    held = await _owned(a, A)
    renewed = await a.renew(held, load=1234.5)
    assert renewed is not None
    done = await a.checkpoint(renewed, "p1", caught_up=False, when=WHEN)
    assert done is not None and done.load == 1234.5
    quiet = await a.renew(done)  # no rate measured: the last one stands
    assert quiet is not None
    row = await b.get(T0)
    assert row is not None and row.load == 1234.5
    taken = await b.acquire(row, B)  # the next owner starts from it
    assert taken is not None and taken.load == 1234.5


async def test_a_processors_leases_spread_over_its_partitions_as_its_identity_says(
    azurite: Azurite,
) -> None:
    processor = f"spread{next(_names)}"

    def store() -> TableLeaseStore:
        return TableLeaseStore.from_connection_string(
            azurite.connection_string, table="cfpleasestest", processor=processor
        )

    async with store() as first, store() as second:
        await first.open()
        assert await first.claim_identity("{}", lease_partitions=4) == "{}"
        tokens = [LeaseToken(f"{i:02d}") for i in range(12)]
        for token in tokens:
            assert await first.create_if_absent(token, None) is not None
        # a host that has not read the identity row yet learns the layout from it
        assert await second.lease_partitions() == 4
        assert [x.token for x in await second.list_leases()] == tokens
        assert [x.token for x in await second.list_range("03", "06")] == tokens[3:6]
        row = await second.get(tokens[5])
        assert row is not None and await second.acquire(row, B) is not None
        client = TableClient.from_connection_string(
            azurite.connection_string, table_name="cfpleasestest"
        )
        async with client:
            rows = client.query_entities(
                "PartitionKey ge @lo and PartitionKey lt @hi",
                parameters={"lo": processor, "hi": processor + "~~"},
            )
            keys = Counter([str(e["PartitionKey"]) async for e in rows])
    assert set(keys) == {processor, *(f"{processor}~{i}" for i in range(4))}
    assert keys[processor] == 1  # the identity row; the leases are in the four others
    assert sum(keys.values()) == 13 and max(keys.values()) < 12


async def test_a_processor_made_before_partitions_keeps_its_leases_in_one(
    azurite: Azurite,
) -> None:
    processor = f"legacy{next(_names)}"
    async with TableLeaseStore.from_connection_string(
        azurite.connection_string, table="cfpleasestest", processor=processor
    ) as store:
        await store.open()
        assert await store.create_if_absent(T0, None) is not None  # no identity row yet
        assert await store.lease_partitions() == 1
        await store.claim_identity("{}")  # as claim_identity does for a legacy processor
        assert await store.lease_partitions() == 1
        assert [x.token for x in await store.list_leases()] == [T0]
