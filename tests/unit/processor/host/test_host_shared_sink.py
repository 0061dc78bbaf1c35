"""The shared sink of docs/observers.md, run as the docs give it: a factory that is an async
context manager, entered once before a host's first lease and left after its last, named by
`--observer module:instance` through the real loader."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path

from leases import LeaseToken, MemoryLeaseStore
from leases.policy.timings import derive_timings
from observers import PluginHost
from processor.clock import SystemClock
from processor.connection import storage_access
from processor.host.assembly import HostClients, assemble
from processor.plugins import ObserverChoice, load_observer_factory
from processor.reading.lease_position import LeasePosition
from processor.reading.lease_reader import LeaseRead, Reader, Step
from tests import patience
from tests.helpers import until
from tests.unit.fakes import ScriptedReader, at, batch, in_memory_config

DOCS = Path(__file__).resolve().parents[4] / "docs" / "observers.md"
SHARDS = ("00", "01", "02")


def documented_module(name: str) -> types.ModuleType:
    """The python block under the docs' "One sink for every lease" heading, as module `name`."""
    text = DOCS.read_text()
    section = text[text.index("### One sink for every lease") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(code.group(1), str(DOCS), "exec"), module.__dict__)
    return module


class NoFeed:
    async def read_document(self, path: str) -> None:
        return None


def four_events(token: str, position: LeasePosition) -> Reader:
    steps = [LeaseRead(Step.BATCH, at(i + 2), batch(i, 2)) for i in (0, 2)]
    return ScriptedReader(steps, position=position)


async def test_the_documented_shared_sink_serves_every_lease_inside_its_context() -> None:
    module = documented_module("docs_shared_sink")
    try:
        sink = module.shared_sink
        assert (
            load_observer_factory(
                ObserverChoice("docs_shared_sink:shared_sink"),
                host=PluginHost("h1", "p", "", SystemClock().wall, storage_access),
            )
            is sink
        )
        store = MemoryLeaseStore()
        for token in SHARDS:
            assert await store.create_if_absent(LeaseToken(token), at(0).to_json())
        host = assemble(
            in_memory_config(
                "h1", "docs_shared_sink:shared_sink", derive_timings(1.5, poll_s=0.05)
            ),
            SystemClock(),
            clients=HostClients(store, NoFeed()),  # type: ignore[arg-type]
            make_reader=four_events,
        ).host
        stop = asyncio.Event()
        run = asyncio.create_task(host.run(stop))

        async def all_delivered() -> bool:
            return len(sink.delivered) == 4 * len(SHARDS)

        await until(all_delivered, "every lease's events in the one sink")
        assert sink.is_open
        stop.set()
        await asyncio.wait_for(run, patience.left_s())
        assert not sink.is_open  # left after the last lease closed
        assert sorted(sink.delivered) == [(t, f"e{i}") for t in SHARDS for i in range(4)]
    finally:
        sys.modules.pop("docs_shared_sink", None)
