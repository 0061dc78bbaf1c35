"""A host stopped while its observers open (a Spark session takes tens of seconds) stops at once,
holding nothing; one whose observers fail to open fails with their error."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

import pytest

from leases.policy.timings import Timings
from leases.store.memory_lease_store import MemoryLeaseStore
from observers import CloseReason
from processor.clock import SystemClock
from processor.host.assembly import HostClients, assemble
from processor.host.health.lifecycle import HostState
from processor.host.host import Host
from tests import patience
from tests.unit.fakes import in_memory_config


class OpensSlowly:
    """An observer factory whose context opens when `opened` is set, or fails with `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.opened = asyncio.Event()
        self.error = error
        self.entered = asyncio.Event()
        self.exited = False

    def __call__(self) -> Any:
        raise AssertionError("no lease may start while the observers open")

    async def __aenter__(self) -> OpensSlowly:
        self.entered.set()
        if self.error is not None:
            raise self.error
        await self.opened.wait()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.exited = True


def make_host(factory: OpensSlowly) -> tuple[Host, MemoryLeaseStore]:
    store = MemoryLeaseStore()
    timings = Timings(expiry_s=10, renew_every_s=3, acquire_every_s=1, poll_s=1)
    config = in_memory_config("h1", "test", timings)
    storage: Any = object()  # never read: no lease starts
    clients = HostClients(store, storage)
    host = assemble(config, SystemClock(), clients=clients, load_observer=lambda c, me: factory)
    return host.host, store


async def test_stopped_while_the_observers_open_the_host_stops_holding_nothing() -> None:
    factory = OpensSlowly()
    host, store = make_host(factory)
    stop = asyncio.Event()
    running = asyncio.create_task(host.run(stop))
    await asyncio.wait_for(factory.entered.wait(), patience.left_s())
    stop.set()
    # factory.opened is never set: it did not wait for it
    await asyncio.wait_for(running, patience.left_s())
    assert host.lifecycle.state is HostState.STOPPED
    assert not factory.exited  # never entered, so never exited
    assert await store.list_leases() == []
    assert not host.supervisor.closed_reasons.get(CloseReason.SHUTDOWN)


async def test_observers_that_fail_to_open_fail_the_host_with_their_error() -> None:
    host, _ = make_host(OpensSlowly(error=RuntimeError("no jars")))
    with pytest.raises(RuntimeError, match="no jars"):
        await host.run(asyncio.Event())
    assert host.lifecycle.state is HostState.FAILED_PERMANENTLY
