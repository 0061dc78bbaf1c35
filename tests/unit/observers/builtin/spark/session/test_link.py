"""The link's decisions on a hand-driven clock, with servers that are up or down: which server a
host opens, when it counts a session lost, how it backs off while none answers, and that it is
back as soon as one does (the real servers are killed in tests/integration/test_spark_loss.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException

from observers.builtin.spark.session.link import (
    RECONNECT_MAX_WAIT_S,
    START_PATIENCE_S,
    LinkTiming,
    Sessions,
    SparkLink,
    SparkUnavailable,
    call_patiently,
)
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.remotes import host_order
from observers.builtin.spark.session.session import SparkOptions
from observers.errors import PluginLoadError
from tests import patience
from tests.helpers import until as eventually

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def refused(remote: str) -> SparkConnectGrpcException:
    return SparkConnectGrpcException(
        message=f'details = "{remote}: Connection refused"',
        grpc_status_code=grpc.StatusCode.UNAVAILABLE,
    )


class Server:
    def __init__(self, remote: str) -> None:
        self.remote, self.up, self.opened = remote, True, 0


class FakeSession:
    """A Connect session: its probe (`conf.get`) answers while its server is up and it is open."""

    def __init__(self, server: Server) -> None:
        self.server, self.closed = server, False
        self.conf = self.client = self

    def get(self, key: str) -> str:
        if not self.server.up or self.closed:
            raise refused(self.server.remote)
        return "UTC"

    def close(self) -> None:
        self.closed = True

    stop = close


class Hand:
    """The link's clocks and sleep: a sleep moves them on as it ends, after letting others run
    a moment (one cut short, the watch of a call that returned, moves nothing)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.now)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0.005)  # fixed on purpose: the fake clock lets the threads run a moment
        self.sleeps.append(seconds)
        self.now += seconds


class Fleet:
    def __init__(self, *remotes: str) -> None:
        self.servers = {r: Server(r) for r in remotes}
        self.tried: list[str] = []

    def open(self, remote: str | None) -> tuple[Any, Any]:
        assert remote is not None
        self.tried.append(remote)
        server = self.servers[remote]
        if not server.up:
            raise refused(remote)
        server.opened += 1
        return FakeSession(server), FakeSession(server)

    def __getitem__(self, remote: str) -> Server:
        return self.servers[remote]


REMOTES = ("sc://a:15002", "sc://b:15002")
HOST = "h1"
ORDER = host_order(REMOTES, HOST)


@pytest.fixture
async def pool() -> AsyncIterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(4)
    yield executor
    executor.shutdown(wait=False)


def make_link(
    fleet: Fleet, hand: Hand, pool: ThreadPoolExecutor, *, watch_every_s: float = 120.0
) -> SparkLink:
    options = SparkOptions(parse_output("/tables"), remotes=REMOTES)
    return SparkLink(
        options,
        host=HOST,
        calls=pool,
        opener=fleet.open,
        timing=LinkTiming(hand.wall, hand.monotonic, hand.sleep, watch_every_s),
    )


async def until(check: Any, what: str) -> None:
    """Until `check()` holds (a synchronous look at the link, the sink or the hand clock)."""

    async def look() -> bool:
        return bool(check())

    await eventually(look, what, every_s=0.005)


def failing(error: BaseException) -> Any:
    def call(sessions: Sessions) -> None:
        raise error

    return call


async def opened_then_every_server_down(
    pool: ThreadPoolExecutor,
) -> tuple[Fleet, Hand, SparkLink, Sessions]:
    """A link open on its first server, then every server of the fleet gone."""
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool)
    first = await link.open()
    for remote in REMOTES:
        fleet[remote].up = False
    return fleet, hand, link, first


async def test_a_host_opens_the_first_server_of_its_order_that_answers(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    fleet[ORDER[0]].up = False
    link = make_link(fleet, hand, pool)
    sessions = await link.open()
    assert (sessions.remote, sessions.generation) == (ORDER[1], 1)
    assert fleet.tried == list(ORDER) and link.outage is None and link.is_up


async def test_a_starting_host_waits_its_patience_then_names_every_server(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    for remote in REMOTES:
        fleet[remote].up = False
    with pytest.raises(PluginLoadError) as raised:
        await make_link(fleet, hand, pool).open()
    assert all(remote in str(raised.value) for remote in REMOTES), raised.value
    assert START_PATIENCE_S <= hand.now <= START_PATIENCE_S + RECONNECT_MAX_WAIT_S
    assert max(hand.sleeps) <= RECONNECT_MAX_WAIT_S


async def test_a_lost_server_takes_the_link_down_until_the_next_one_answers(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool)
    first = await link.open()
    reopened: list[Sessions] = []
    link.listeners.append(reopened.append)
    hand.now = 42.0
    tried = len(fleet.tried)
    fleet[first.remote or ""].up = False
    with pytest.raises(SparkUnavailable) as raised:
        await link.call(failing(refused(first.remote or "")), what="a write")
    outage = raised.value.outage
    assert outage is not None and outage.since == T0 + timedelta(seconds=42)
    assert first.remote in outage.reason and "Connection refused" in outage.reason
    await until(lambda: link.is_up, "the link back up")
    assert link.sessions.remote == ORDER[1] and link.sessions.generation == 2
    assert [s.remote for s in reopened] == [ORDER[1]] and link.outage is None
    assert fleet.tried[tried:] == [ORDER[1]]  # the next server first, not the lost one again
    assert link.losses == 1


async def test_while_no_server_answers_the_link_backs_off_and_is_back_when_one_does(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand, link, _ = await opened_then_every_server_down(pool)
    with pytest.raises(SparkUnavailable):
        await link.call(failing(refused(ORDER[0])), what="a write")
    with pytest.raises(SparkUnavailable):  # while down, at once, without a call to Spark
        await link.call(failing(AssertionError("never called")), what="a write")
    await until(lambda: hand.now > 120, "two minutes of rounds of tries")
    assert link.down.is_set() and not link.is_up
    assert max(hand.sleeps) <= RECONNECT_MAX_WAIT_S
    rounds = len(hand.sleeps)
    assert rounds >= 120 / RECONNECT_MAX_WAIT_S, hand.sleeps  # it never stopped trying
    fleet[ORDER[0]].up = True  # the lost server, restarted
    back_at = hand.now
    await until(lambda: link.is_up, "the link back up")
    assert link.sessions.remote == ORDER[0]
    assert hand.now - back_at <= RECONNECT_MAX_WAIT_S  # found at the next round


async def test_spark_refusing_a_call_leaves_the_link_up(pool: ThreadPoolExecutor) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool)
    await link.open()
    error = AnalysisException(message="[PATH_NOT_FOUND] x", errorClass="PATH_NOT_FOUND")
    with pytest.raises(AnalysisException):
        await link.call(failing(error), what="a write")
    assert link.is_up and link.losses == 0 and sum(s.opened for s in fleet.servers.values()) == 1


async def test_an_error_that_says_nothing_is_a_loss_when_the_server_is_silent(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool)
    first = await link.open()
    with pytest.raises(ValueError, match="odd"):  # the server answers: Spark's own failure
        await link.call(failing(ValueError("odd")), what="a write")
    assert link.is_up
    fleet[first.remote or ""].up = False
    with pytest.raises(SparkUnavailable):
        await link.call(failing(ValueError("odd")), what="a write")
    await until(lambda: link.is_up, "the link back up")


async def test_a_late_failure_of_sessions_lost_before_leaves_the_new_ones_alone(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool)
    first = await link.open()
    link.lose(first, refused(first.remote or ""))
    await until(lambda: link.is_up, "the link back up")
    assert await link.lost_by(first, refused(first.remote or ""))  # theirs was lost, yes...
    assert link.is_up and link.losses == 1  # ...and the new ones stand


async def test_a_call_to_a_server_that_stops_answering_is_given_up(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool, watch_every_s=30.0)
    first = await link.open()
    hanging = threading.Event()

    def hangs(sessions: Sessions) -> str:
        assert hanging.wait(patience.left_s())
        return "written"

    try:
        call = asyncio.ensure_future(link.call(hangs, what="a write"))
        await until(lambda: hand.now >= 90, "three looks at a server that answers")
        assert not call.done() and link.is_up  # slow, on a server that answers: it goes on
        fleet[first.remote or ""].up = False  # ...until it answers no more
        with pytest.raises(SparkUnavailable):
            await call
        assert isinstance(first.writer, FakeSession)
        await until(lambda: first.writer.closed, "the lost session's channel closed")
    finally:
        hanging.set()
    await until(lambda: link.is_up, "the link back up")


async def test_a_slow_call_on_a_server_that_answers_returns_its_result(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand = Fleet(*REMOTES), Hand()
    link = make_link(fleet, hand, pool, watch_every_s=30.0)
    await link.open()
    slow = threading.Event()

    def takes_long(sessions: Sessions) -> str:
        assert slow.wait(patience.left_s())
        return "written"

    call = asyncio.ensure_future(link.call(takes_long, what="a write"))
    await until(lambda: hand.now >= 300, "ten looks at its server")
    slow.set()
    assert await call == "written"
    assert link.is_up and link.losses == 0


def made_on_an_open_server(calls: list[str | None]) -> Any:
    """A host's first call (its tables): refused while its server is away, else the server."""

    def call(sessions: Sessions) -> str | None:
        calls.append(sessions.remote)
        if not sessions.writer.server.up:
            raise refused(sessions.remote or "")
        return sessions.remote

    return call


async def test_a_first_call_whose_server_is_lost_is_made_again_once_one_is_back(
    pool: ThreadPoolExecutor,
) -> None:
    fleet, hand, link, first = await opened_then_every_server_down(pool)
    calls: list[str | None] = []
    made = asyncio.create_task(
        call_patiently(link, made_on_an_open_server(calls), what="the tables")
    )
    await until(lambda: hand.now > 60, "a minute of rounds of tries")
    assert not made.done() and calls == [first.remote]  # waiting, not calling a lost server
    fleet[ORDER[1]].up = True
    assert await made == ORDER[1]
    assert calls == [first.remote, ORDER[1]] and link.is_up


async def test_a_first_call_gives_up_once_its_patience_runs_out(pool: ThreadPoolExecutor) -> None:
    _, hand, link, _ = await opened_then_every_server_down(pool)
    calls: list[str | None] = []
    with pytest.raises(SparkUnavailable):
        await call_patiently(link, made_on_an_open_server(calls), what="the tables", patience_s=100)
    assert 100 <= hand.now <= 100 + 2 * RECONNECT_MAX_WAIT_S and len(calls) == 1
    await link.close()
