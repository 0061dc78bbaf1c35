"""`cfp processor reset`'s steps on a memory store: when it refuses, and what it writes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import click
import pytest

from leases import HostId, HostReport, LeaseToken, MemoryLeaseStore, ProcessorState
from leases.policy.timings import DEFAULT_EXPIRY_S
from processor.admin.reset import ResetTo
from processor.cli.admin.reset_job import Refused, ResetJob, reset_to, watch_for_s

NOW = datetime(2026, 11, 25, tzinfo=UTC)
JOB = ResetJob(
    conn="",
    lease_conn=None,
    table="leases",
    processor="p",
    to=ResetTo.BEGINNING,
    start_time=None,
    reason="why",
    lease_expiration=None,
)


async def store_with(*tokens: str, paused: bool = True) -> MemoryLeaseStore:
    store = MemoryLeaseStore()
    for token in tokens:
        await store.create_if_absent(LeaseToken(token), None)
    await store.set_processor_state(ProcessorState(paused=paused))
    return store


def host(expiry_s: float) -> HostReport:
    return HostReport(HostId("h"), "RUNNING", NOW, NOW, 0, expiry_s)


def test_exactly_one_of_the_flags_says_where_the_leases_go() -> None:
    assert reset_to(NOW, from_beginning=False, from_now=False) is ResetTo.START_TIME
    assert reset_to(None, from_beginning=True, from_now=False) is ResetTo.BEGINNING
    assert reset_to(None, from_beginning=False, from_now=True) is ResetTo.NOW
    for flags in [(None, False, False), (NOW, True, False), (None, True, True)]:
        with pytest.raises(click.UsageError, match="exactly one of"):
            reset_to(flags[0], from_beginning=flags[1], from_now=flags[2])


def test_owners_are_watched_as_long_as_asked_else_the_hosts_longest_expiry() -> None:
    assert watch_for_s(2.0, [host(30.0)]) == 2.0
    assert watch_for_s(None, [host(10.0), host(30.0), host(0.0)]) == 30.0
    assert watch_for_s(None, [host(0.0)]) == watch_for_s(None, []) == DEFAULT_EXPIRY_S


async def test_a_paused_processor_without_owners_is_reset_at_once() -> None:
    store = await store_with("00", "01")
    plan = await JOB.reset(store, asyncio.Event())
    assert [x.token for x in plan.leases] == ["00", "01"]
    after = await store.list_leases()
    assert [(x.epoch, x.continuation) for x in after] == [(1, plan.position.to_json())] * 2
    assert after[0].moves[-1].reason == "reset to the beginning of the feed: why"


async def test_a_processor_not_paused_or_without_leases_is_refused_untouched() -> None:
    running = await store_with("00", paused=False)
    with pytest.raises(Refused, match="is not paused") as refused:
        await JOB.reset(running, asyncio.Event())
    assert refused.value.status == 2 and (await running.list_leases())[0].epoch == 0
    with pytest.raises(Refused, match="has no leases in table 'leases'"):
        await JOB.reset(await store_with(), asyncio.Event())


async def test_a_stop_while_owners_are_watched_writes_nothing() -> None:
    store = await store_with("00")
    (free,) = await store.list_leases()
    await store.acquire(free, HostId("h1"))
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(Refused, match="interrupted while watching") as refused:
        await JOB.reset(store, stop)
    assert refused.value.status == 130 and (await store.list_leases())[0].owner == "h1"
