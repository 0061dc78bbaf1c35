"""Two hosts in one process on the in-memory lease store, reading scripted shards: the second
host's arrival moves half the leases by cooperative hand-over, and every event of every shard is
delivered once, in order, whichever host delivered it."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from leases import HostId, LeaseToken, MemoryLeaseStore
from leases.policy.timings import derive_timings
from observers import PartitionContext
from processor.clock import SystemClock
from processor.host.assembly import HostClients, assemble
from processor.host.host import Host
from processor.reading.lease_position import LeasePosition
from processor.reading.lease_reader import LeaseRead, Reader, Step
from tests import patience
from tests.helpers import until
from tests.unit.fakes import ScriptedReader, at, batch, in_memory_config

SHARDS = ("00", "01", "02", "03")
EVENTS = 40  # per shard
BATCH = 2


class NoFeed:
    """Storage of an empty $blobchangefeed: no segment, so no lease is created from it."""

    async def read_document(self, path: str) -> None:
        return None


def shard_reader(go: asyncio.Event) -> Callable[[str, LeasePosition], Reader]:
    """The rest of a shard after a position, in batches of BATCH events; its second half is
    not there yet (the reader is caught up) until `go` is set, so that every lease is mid-shard
    while the hosts balance."""

    def make(token: str, position: LeasePosition) -> Reader:
        start = position.shard.block_offset
        steps = [
            LeaseRead(Step.BATCH, at(i + BATCH), batch(i, BATCH))
            for i in range(start, EVENTS, BATCH)
        ]

        def second_half_not_yet(at: LeasePosition) -> bool:
            return at.shard.block_offset >= EVENTS // 2 and not go.is_set()

        return ScriptedReader(steps, position=position, holding=second_half_not_yet)

    return make


def host(name: str, store: MemoryLeaseStore, seen: dict[str, list[str]], go: asyncio.Event) -> Host:
    class Recording:
        async def process_changes(self, ctx: PartitionContext, events: Any) -> None:
            seen[ctx.lease_token].extend(f"{e.id}@{ctx.host_name}" for e in events)

    config = in_memory_config(name, "recording", derive_timings(1.5, poll_s=0.05))
    return assemble(
        config,
        SystemClock(),
        clients=HostClients(store, NoFeed()),  # type: ignore[arg-type]
        load_observer=lambda choice, me: Recording,
        make_reader=shard_reader(go),
    ).host


async def test_a_second_host_takes_half_by_hand_over_and_nothing_is_delivered_twice() -> None:
    store = MemoryLeaseStore()
    for token in SHARDS:
        assert await store.create_if_absent(LeaseToken(token), at(0).to_json())
    seen: dict[str, list[str]] = defaultdict(list)
    go = asyncio.Event()
    h1, h2 = host("h1", store, seen, go), host("h2", store, seen, go)
    stop1, stop2 = asyncio.Event(), asyncio.Event()

    def owners_are(h1_count: int, h2_count: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            owners = [x.owner for x in await store.list_leases()]
            return owners.count(HostId("h1")) == h1_count and owners.count(HostId("h2")) == h2_count

        return probe

    async def all_read() -> bool:
        return all(x.continuation == at(EVENTS).to_json() for x in await store.list_leases())

    run1 = asyncio.create_task(h1.run(stop1))
    run2: asyncio.Task[None] | None = None
    try:
        await until(owners_are(4, 0), "h1 alone holding every lease")
        run2 = asyncio.create_task(h2.run(stop2))
        await until(owners_are(2, 2), "two leases handed over, mid-shard")
        go.set()
        await until(all_read, "every shard read to its end")
    finally:
        stop1.set()
        stop2.set()
        await asyncio.wait_for(asyncio.gather(run1, *([run2] if run2 else [])), patience.left_s())
    moved = 0
    for token in SHARDS:
        ids = [x.split("@")[0] for x in seen[token]]
        assert ids == [f"e{i}" for i in range(EVENTS)], token  # once each, in order
        hosts = [x.split("@")[1] for x in seen[token]]
        moved += (hosts[0], hosts[-1]) == ("h1", "h2")
    assert moved == 2  # h1 delivered the first half of every shard, h2 the rest of two
