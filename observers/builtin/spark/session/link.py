"""The host's Spark sessions, and what happens when their Spark Connect server is lost.

A host writes through two sessions on one Spark (the writers' and the state job's). With Spark
Connect that Spark is a server of its own, which can be killed, restarted, or lose its machine.
`SparkLink` holds the sessions and every call goes through it (`call`), in a thread:

- a call that fails because the session is gone (`liveness.is_lost`, or its server no longer
  answering a cheap call) marks the link down: an `Outage` the host reports, and
  `SparkUnavailable` for every call until it is back;
- a call that runs for `watch_every_s` makes the link ask the server whether it is still there,
  and again each time that passes: a call to a server that hangs or vanished without a word is
  given up (its thread ends when the lost session's channel is closed), one to a server that
  is merely slow goes on;
- while down, a task opens new sessions (settings and credentials again, `session.prepare`) on
  the servers of `--spark-remote` in the host's order (`remotes.after_loss`: the next server
  first, the lost one last), backing off with tenacity until one answers. Then the link is up
  at a new `generation`, and its listeners (the sink: every lease syncs again) are told.

An embedded session (`remotes` empty) is opened once and never watched: its JVM is the host's
own child.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from observers.builtin.spark.session.liveness import answers, close_quietly, first_line, is_lost
from observers.builtin.spark.session.remotes import after_loss, describe, host_order
from observers.builtin.spark.session.session import SparkOptions, new_session, open_session
from observers.builtin.spark.threads import in_daemon_thread
from observers.errors import PluginLoadError, Unavailable
from observers.protocol import Outage

log = structlog.get_logger("cfp.spark")
T = TypeVar("T")

START_PATIENCE_S = 300.0  # a starting host waits this long for a server, then exits 2
OPEN_TIMEOUT_S = 120.0  # opening one server's two sessions (a dozen calls) takes at most this
WATCH_EVERY_S = 120.0  # a call running this long: is its server still there? (then again)
PROBE_TIMEOUT_S = 60.0  # ...which it must answer within this (a loaded server is slow)
STOP_TIMEOUT_S = 30.0  # stopping the sessions at the end, on a server that may not answer
# between rounds of tries while down: random, doubling from 0.5 s up to this (a server that
# starts again is found within a few seconds of listening; a refused connection costs nothing)
RECONNECT_MAX_WAIT_S = 4.0
RETRY_AFTER_S = 1.0  # how soon a lease offers a refused batch again while down
LOGGED_ROUNDS = 5  # rounds of tries logged one by one, then one in LOG_EVERY
LOG_EVERY = 15


class SparkUnavailable(Unavailable):
    """No Spark Connect server of the host's answers now; the host's leases wait."""

    def __init__(self, outage: Outage | None) -> None:
        super().__init__(
            outage.describe() if outage else "spark unavailable", retry_after_s=RETRY_AFTER_S
        )
        self.outage = outage


class NoServer(Exception):
    """No server of a round of tries opened a session; what each said."""


@dataclass(frozen=True, slots=True)
class Sessions:
    """One opening of the host's sessions: on which server (None: embedded), and which."""

    remote: str | None
    writer: Any  # the change log's writes, fences and floors
    job: Any  # the state job's own (its settings must not leak into the writes)
    generation: int  # 1 for the first opening, one more for each opening after a loss


Opener = Callable[[str | None], tuple[Any, Any]]  # blocking: a server (None: embedded) -> sessions


@dataclass(frozen=True, slots=True)
class LinkTiming:
    """The link's clocks and pace: wall time (an outage's start), monotonic time, how it
    sleeps between tries, and how often it looks whether its server is still there. Tests give
    their own, to run an outage without waiting for it."""

    wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    watch_every_s: float = WATCH_EVERY_S


class SparkLink:
    def __init__(
        self,
        options: SparkOptions,
        *,
        host: str,
        calls: Executor,
        opener: Opener | None = None,
        sessions: Sessions | None = None,  # tests of the sink: sessions given, never reopened
        timing: LinkTiming | None = None,
    ) -> None:
        timing = timing or LinkTiming()
        self.order = host_order(options.remotes, host)
        self._calls = calls
        self._opener = opener or _opener(options)
        self._sessions = sessions
        self._wall, self._monotonic, self._sleep = timing.wall, timing.monotonic, timing.sleep
        self._watch_every_s = timing.watch_every_s
        self._outage: Outage | None = None
        self.up = asyncio.Event()  # set while the sessions answer
        self.down = asyncio.Event()  # set while they do not
        if sessions is not None:
            self.up.set()
        self.listeners: list[Callable[[Sessions], None]] = []  # told of each reopening
        self.losers: list[Callable[[], None]] = []  # told of each loss
        self._reconnecting: asyncio.Task[None] | None = None
        self._closed = False
        self.losses = 0

    @property
    def is_up(self) -> bool:
        return self.up.is_set()

    @property
    def outage(self) -> Outage | None:
        return self._outage

    @property
    def current(self) -> Sessions | None:
        """The sessions in use, or last in use while down (None before the first opening)."""
        return self._sessions

    @property
    def sessions(self) -> Sessions:
        """The current sessions. Errors: `SparkUnavailable` while down (or not open yet)."""
        if self._sessions is None or not self.up.is_set():
            raise SparkUnavailable(self._outage)
        return self._sessions

    def details(self) -> dict[str, object]:
        """For `/status`: the server in use (or last in use), the host's order, the openings."""
        current = self._sessions
        return {
            "remote": current.remote if current is not None else None,
            "servers": list(self.order),
            "sessionsOpened": current.generation if current is not None else 0,
            "losses": self.losses,
        }

    async def open(self) -> Sessions:
        """The first sessions: embedded, or on the first server of the host's order that
        answers within `START_PATIENCE_S`. Errors: `PluginLoadError` naming the servers."""
        if not self.order:
            writer, job = await in_daemon_thread(lambda: self._opener(None))
            self._install(Sessions(None, writer, job, 1))
        else:
            await self._connect(self.order, patience_s=START_PATIENCE_S)
        return self.sessions

    async def call(self, fn: Callable[[Sessions], T], *, what: str) -> T:
        """`fn(sessions)`, a blocking call, in a thread of the link's pool, watched while it
        runs (Spark Connect). Errors: `SparkUnavailable` while down or when the call lost the
        session; else the call's own."""
        sessions = self.sessions
        call = functools.partial(contextvars.copy_context().run, fn, sessions)
        future = asyncio.get_running_loop().run_in_executor(self._calls, call)
        future.add_done_callback(_consume)
        try:
            return await self._watched(future, sessions, what)
        except SparkUnavailable:
            raise
        except Exception as e:
            if await self.lost_by(sessions, e):
                raise SparkUnavailable(self._outage) from e
            raise

    async def lost_by(self, sessions: Sessions, error: BaseException) -> bool:
        """Whether `error`, of a call on `sessions`, means they are lost (then the link is
        down, if it was not already): it says so, or their server no longer answers."""
        if sessions.remote is None:
            return False
        if sessions is not self._sessions or not self.up.is_set():
            return True  # lost before (and maybe opened again since)
        if not is_lost(error) and await _answers(sessions):
            return False
        self.lose(sessions, error)
        return True

    def lose(self, sessions: Sessions, error: BaseException) -> None:
        """`sessions` are lost (once per opening): down, and trying the servers again."""
        if sessions is not self._sessions or not self.up.is_set():
            return
        self.losses += 1
        why = f"{sessions.remote}: {first_line(error)}"
        self._outage = Outage("spark", self._wall(), why)
        self.up.clear()
        self.down.set()
        log.error("spark.unavailable", remote=sessions.remote, error=why, losses=self.losses)
        for loser in self.losers:
            loser()
        _close_in_background(sessions)
        order = after_loss(self.order, sessions.remote)
        self._reconnecting = asyncio.create_task(self._connect(order), name="spark-reconnect")

    async def close(self) -> None:
        """Stop trying, and stop the sessions (bounded: a server that does not answer is left
        as it is)."""
        self._closed = True  # (a cancellation that a finished call swallows still ends it)
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnecting
        sessions = self._sessions
        if sessions is None:
            return
        stop = _stop_both if self.up.is_set() else _close_both
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await in_daemon_thread(lambda: stop(sessions))

    async def _watched(self, future: asyncio.Future[T], sessions: Sessions, what: str) -> T:
        """The call's result; every `watch_every_s` it runs, its server asked whether it is
        still there: one that does not answer loses the sessions."""
        if sessions.remote is None:
            return await future
        while True:
            timer: asyncio.Future[Any] = asyncio.ensure_future(self._sleep(self._watch_every_s))
            try:
                await asyncio.wait([future, timer], return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if future.done():
                return future.result()
            if sessions is not self._sessions or not await _answers(sessions):
                silent = TimeoutError(f"{what}: no answer, and the server does not answer")
                self.lose(sessions, silent)
                raise SparkUnavailable(self._outage)
            log.info("spark.call_slow", what=what, remote=sessions.remote)

    async def _connect(self, order: tuple[str, ...], *, patience_s: float | None = None) -> None:
        """Sessions on the first server of `order` that answers, tried in rounds with a backoff
        until one does (or `patience_s` passes: `PluginLoadError`)."""
        started = self._monotonic()

        def out_of_patience(_: RetryCallState) -> bool:
            if self._closed:
                return True
            return patience_s is not None and self._monotonic() - started >= patience_s

        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(NoServer),
                wait=wait_random_exponential(multiplier=0.5, max=RECONNECT_MAX_WAIT_S),
                stop=out_of_patience,
                sleep=self._sleep,
                before_sleep=_log_round,
                reraise=True,
            ):
                with attempt:
                    sessions = await self._first_answering(order)
        except NoServer as e:
            if self._closed:
                return
            raise PluginLoadError(
                "spark",
                f"no Spark Connect server answered within {patience_s:.0f} s ({e})",
            ) from e
        self._install(sessions)

    async def _first_answering(self, order: tuple[str, ...]) -> Sessions:
        said: list[str] = []
        generation = self._sessions.generation + 1 if self._sessions is not None else 1
        for remote in order:
            try:
                async with asyncio.timeout(OPEN_TIMEOUT_S):
                    writer, job = await in_daemon_thread(functools.partial(self._opener, remote))
            except PluginLoadError as e:  # no Delta there: a server for something else
                said.append(f"{remote}: {e.problem}")
            except Exception as e:
                said.append(f"{remote}: {first_line(e) if str(e) else 'no answer in time'}")
            else:
                return Sessions(remote, writer, job, generation)
        if self._outage is not None:
            self._outage = Outage(self._outage.what, self._outage.since, said[-1])
        raise NoServer("; ".join(said))

    def _install(self, sessions: Sessions) -> None:
        outage, self._sessions, self._outage = self._outage, sessions, None
        self.down.clear()
        self.up.set()
        if outage is None:
            log.info("spark.connected", remote=sessions.remote, servers=describe(self.order))
            return
        down_s = (self._wall() - outage.since).total_seconds()
        log.warning(
            "spark.available",
            remote=sessions.remote,
            down_s=round(down_s, 1),
            generation=sessions.generation,
        )
        for listener in self.listeners:
            listener(sessions)


async def _answers(sessions: Sessions) -> bool:
    """Whether the server of `sessions` answers within `PROBE_TIMEOUT_S` (asked in a thread of
    its own: the pool's may all wait on that server)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            return await in_daemon_thread(lambda: answers(sessions.writer), "spark-probe")
    except TimeoutError:
        return False


def _opener(options: SparkOptions) -> Opener:
    def open_both(remote: str | None) -> tuple[Any, Any]:
        writer = open_session(options, remote) if remote else open_session(options)
        try:
            return writer, new_session(writer, options, remote)
        except BaseException:
            if remote is not None:
                close_quietly(writer)
            raise

    return open_both


def _stop_both(sessions: Sessions) -> None:
    if sessions.remote is not None:
        sessions.job.stop()  # a session of its own on the server
    sessions.writer.stop()


def _close_in_background(sessions: Sessions) -> None:
    """Close lost sessions in a thread of their own (up to 10 s: PySpark waits for its
    releases), so that calls still waiting on them end now, with an error, and free their
    threads."""
    threading.Thread(target=_close_both, args=(sessions,), name="spark-close", daemon=True).start()


def _close_both(sessions: Sessions) -> None:
    close_quietly(sessions.job)
    close_quietly(sessions.writer)


def _log_round(state: RetryCallState) -> None:
    n = state.attempt_number
    if n <= LOGGED_ROUNDS or n % LOG_EVERY == 0:
        error = state.outcome.exception() if state.outcome else None
        wait_s = round(state.upcoming_sleep, 1)
        log.warning("spark.reconnect_failed", round=n, wait_s=wait_s, tried=str(error))


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a given-up call's outcome, so that its error is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


async def call_patiently(
    link: SparkLink, fn: Callable[[Sessions], T], *, what: str, patience_s: float = START_PATIENCE_S
) -> T:
    """`link.call`, made again each time the link is back, for `patience_s` from the first try:
    what a host must do before it starts (its tables), on a server lost meanwhile, would
    otherwise stop the host although another server (or the same, restarted) is coming.
    Errors: `SparkUnavailable` once patience runs out; else the call's own."""
    clock, sleep = link._monotonic, link._sleep
    deadline = clock() + patience_s
    while True:
        try:
            return await link.call(fn, what=what)
        except SparkUnavailable as e:
            outage = e.outage
        log.warning("spark.waiting", what=what, outage=outage.describe() if outage else None)
        while not link.is_up:
            left = deadline - clock()
            if left <= 0 or link._closed:
                raise SparkUnavailable(link.outage)
            await sleep(min(left, 0.5))
