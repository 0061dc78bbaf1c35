"""`--observer spark`: each lease's batches into the host's shared `SparkSink`, and the state job.

`process_arrow` turns the batch's columns into the change log's rows (Arrow compute, in a thread),
queues them (so reading goes on while Spark writes) and takes a mark; the sink checkpoints that
mark once the batch is in the change log. A
failed write fails the lease's next call, so the worker closes it with OBSERVER_ERROR and the
batches are read again from the last checkpoint. A Spark Connect server lost is not a failed
write: the sink keeps the lease's batches until it is back (`session/link.py`), and refuses more
than a write's worth meanwhile (`SparkUnavailable`: the worker offers the batch again).

Events of the output's own container are left out when the output lies in the account whose
feed the host reads (`excluded_container`): the tables' writes would come back as events, for
ever. They still move the checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import structlog

from observers.builtin.spark.changelog.hint_appends import HintAppends
from observers.builtin.spark.changelog.hint_writers import HintWriter, hint_commit, spark_commit
from observers.builtin.spark.changelog.sink import SparkSink
from observers.builtin.spark.session.container import ensure_container
from observers.builtin.spark.session.install import require as require_pyspark
from observers.builtin.spark.session.link import SparkUnavailable
from observers.builtin.spark.session.output import access_for, excluded_container, parse_output
from observers.builtin.spark.session.remotes import parse_remotes
from observers.builtin.spark.session.session import SparkOptions, spark_conf
from observers.builtin.spark.settings import SparkSettings
from observers.builtin.spark.state.hint_run import HintsKept
from observers.builtin.spark.state.state_job import StateJob
from observers.builtin.spark.threads import run_blocking
from observers.errors import PluginLoadError, ReplayRequired
from observers.events import changes_table
from observers.options import PluginHost
from observers.protocol import (
    ArrowBatch,
    CloseReason,
    JobRun,
    LeaseLostError,
    PartitionContext,
    SinkHealth,
    UnconfirmedHints,
)

log = structlog.get_logger("cfp.spark")

OPTIMIZE_EVERY_S = 15 * 60.0  # the state job compacts both tables this often


class SparkWriteError(ReplayRequired):
    """A Spark write holding this lease's batch failed; the lease cannot go on past it."""


CLOSE_TIMEOUT_S = 120.0
WRITES_FIRST_S = 120.0  # a state job run waits at most this for the writes queued at a reopening
# A lease handed over while Spark is away waits this long for a server before giving its batches
# up: less than the 30 s after which the host that asked takes it by force (leases.policy.timings)
HANDOVER_SPARK_WAIT_S = 20.0


class SparkObserver:
    auto_checkpoint = False

    def __init__(
        self, sink: SparkSink, *, excluded: str | None = None, hints: HintAppends | None = None
    ) -> None:
        self.sink = sink
        self.excluded = excluded
        self.hints = hints
        self._in_flight: list[asyncio.Future[None]] = []

    async def open(self, ctx: PartitionContext) -> None:
        self.sink.open_lease(ctx.lease_token, ctx.epoch, ctx.processor_name)

    async def held_through(self, ctx: PartitionContext, first: str) -> str | None:
        """The lease's floor in the change log, read after its fence from `first` on: what an
        owner before us wrote and never checkpointed is not delivered again."""
        return await self.sink.leases.floor(ctx.lease_token, first)

    async def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        self._raise_failed()
        mark = ctx.mark()

        async def checkpoint() -> None:
            try:
                await ctx.checkpoint(mark)
            except LeaseLostError:
                # in the change log already; the lease's next owner replays it, adding nothing
                ctx.log.info("spark.checkpoint_refused")

        table = await run_blocking(self.sink.calls, functools.partial(self._table, batch))
        future = await self.sink.submit(ctx.lease_token, table, checkpoint)
        self._in_flight.append(future)

    async def process_hints(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Hints into OUTPUT/hints (one commit per `--spark-max-wait` for all of the host's),
        for the state job to fold into the state; never into the change log. Without
        `hints=true` (cfp run --hints-queue sets it) there is no such table: refused."""
        if self.hints is None:
            raise RuntimeError("the Spark observer was not opened with hints=true")
        table = await run_blocking(self.sink.calls, functools.partial(self._table, batch))
        await self.hints.append(table)

    def _table(self, batch: ArrowBatch) -> pa.Table:
        table = changes_table(batch)
        if self.excluded is not None:
            table = table.filter(pc.not_equal(table["container"], pa.scalar(self.excluded)))
        return table

    async def close(self, ctx: PartitionContext, reason: CloseReason) -> None:
        """Wait until every queued batch of this lease is written and checkpointed, for up to
        `CLOSE_TIMEOUT_S`. Giving up leaves the writes be (they belong to the host's sink, and
        the lease's next owner replays whatever they do not checkpoint). While Spark is away
        its queued batches are given up (nothing would write them): at once, or, when another
        host asked for the lease, after `HANDOVER_SPARK_WAIT_S` without a server, so that a
        server back soon lands them instead of the next owner reading them all again."""
        if not self.sink.link.is_up and reason is CloseReason.HANDED_OVER:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HANDOVER_SPARK_WAIT_S):
                    await self.sink.link.up.wait()
        if not self.sink.link.is_up:
            left = await self.sink.close_lease(ctx.lease_token)
            if left:
                ctx.log.warning("spark.lease_left_unwritten", rows=left, reason=reason.value)
        try:
            if self._in_flight:
                _, late = await asyncio.wait(self._in_flight, timeout=CLOSE_TIMEOUT_S)
                if late:
                    raise TimeoutError(
                        f"lease {ctx.lease_token}: {len(late)} Spark writes still running after "
                        f"{CLOSE_TIMEOUT_S:.0f} s; closed without their checkpoints"
                    )
        finally:
            await self.sink.close_lease(ctx.lease_token)
        self._raise_failed(closing=True)

    def _raise_failed(self, *, closing: bool = False) -> None:
        done = [f for f in self._in_flight if f.done()]
        self._in_flight = [f for f in self._in_flight if not f.done()]
        for f in done:
            error = f.exception()
            if closing and isinstance(error, SparkUnavailable):  # given up as the lease closed
                continue
            if error is not None:
                self._in_flight = [f]  # sticky: this lease cannot go on past a lost batch
                raise SparkWriteError(f"spark write failed: {error!r}") from error


class SparkStateJob:
    """The state job as a `SingletonJob` of the host: runs `StateJob` in a thread, on the
    sink's second session."""

    name = "state"

    def __init__(self, sink: SparkSink, options: SparkOptions) -> None:
        self.sink = sink
        self.every_s = options.state_interval_s
        # one interval after taking the job, not at once: a starting host's first writes (a
        # cold JVM, a fence per lease) would share the CPU with a run that folds the whole
        # change log (bench/spark_ingest: 34 s beside the whole ingest on 2 cores)
        self.first_run_after_s = options.state_interval_s
        self.unconfirmed: UnconfirmedHints | None = None  # as the last count of ours said
        self._options = options
        self._job: StateJob | None = None
        self._generation = 0  # of the sessions `_job` runs on
        self._left: str | None = None  # the continuation our last run returned

    async def run(self, continuation: str | None, *, final: bool = False) -> JobRun:
        """One run on the job's session. Errors: `SparkUnavailable` while Spark is away."""
        link = self.sink.link
        sessions = link.sessions
        job = self._job
        if job is None or self._generation != sessions.generation:  # first, or Spark came back
            job = self._job = StateJob(
                sessions.job,
                changes=self._options.changes,
                state_table=self._options.state,
                history_table=self._options.history,
                optimize_every_s=OPTIMIZE_EVERY_S,
                wall=self._options.wall,
                hints=HintsKept(
                    self._options.output.hints,
                    self._options.hints_confirm_within_s,
                    changes_every_s=self._options.state_every_s,
                )
                if self._options.hints
                else None,
            )
            self._generation = sessions.generation
            job.optimized_at = _saved_time(continuation, "optimizedAt")
        if continuation != self._left:  # not where our last run left it: another host ran it
            job.forget()
        with contextlib.suppress(TimeoutError):  # Spark just came back: the writes go first
            async with asyncio.timeout(WRITES_FIRST_S):
                await self.sink.caught_breath.wait()
        run = await link.call(lambda _: job.run_once(final=final), what="the state job")
        saved = {
            "appliedChangesVersion": run.applied,
            "changesVersion": run.latest,
            "optimizedAt": job.optimized_at.isoformat() if job.optimized_at else None,
        }
        summary = {
            "applied": run.applied,
            "latest": run.latest,
            "inserted": run.inserted,
            "updated": run.updated,
            "skipped": run.skipped,
            "whole": run.whole,
            "optimized": run.optimized,
            "history": run.history,
        }
        if run.hints is not None:
            summary["hintsApplied"] = run.hints.applied
            summary["hinted"] = run.hints.inserted + run.hints.updated
        if run.unconfirmed is not None:
            self.unconfirmed = UnconfirmedHints(
                run.unconfirmed.provisional, run.unconfirmed.overdue
            )
            summary["provisional"] = run.unconfirmed.provisional
        self._left = json.dumps(saved)
        return JobRun(self._left, run.is_caught_up, summary)


def _saved_time(continuation: str | None, key: str) -> datetime | None:
    try:
        value = json.loads(continuation or "{}").get(key)
        return datetime.fromisoformat(value).astimezone(UTC) if value else None
    except (ValueError, TypeError, AttributeError):
        return None


class SparkObserverFactory:
    """One Spark session and sink per host, one `SparkObserver` per lease, and the state job.

    The change log is a set of events, which needs no order across segments: the host drops the
    segment barrier, which would otherwise hold every segment until the previous one's Spark
    write is checkpointed."""

    needs_segment_order = False
    Options = SparkSettings  # made by the host from --observer-option or cfp run's own flags

    def __init__(self, settings: SparkSettings, host: PluginHost) -> None:
        options = self.options = spark_options(settings, host)
        self.sink = SparkSink(options, host=host.host_name)
        self.excluded = excluded_container(options.output, options.access, options.feed)
        self.state_job = SparkStateJob(self.sink, options)
        self.jobs: list[Any] = [self.state_job]
        self.hints = (  # through Spark until the tables exist, then maybe delta-rs
            HintAppends(
                spark_commit(self.sink.link, options.output.hints),
                max_wait_s=options.max_wait_s,
                writer=HintWriter.SPARK,
            )
            if options.hints
            else None
        )

    def __call__(self) -> SparkObserver:
        return SparkObserver(self.sink, excluded=self.excluded, hints=self.hints)

    def health(self) -> SinkHealth:
        """Whether Spark answers (an `Outage` while a Spark Connect server is lost), and, on
        the state job's holder with hints, what they left unconfirmed."""
        health = self.sink.health()
        return dataclasses.replace(health, unconfirmed=self.state_job.unconfirmed)

    @property
    def dead_letter_dir(self) -> str | None:
        """Where `--on-observer-error dead-letter` sets batches aside unless told: a local
        output's `dead-letter` folder."""
        local = self.options.output.local
        return None if local is None else str(local / "dead-letter")

    async def __aenter__(self) -> SparkObserverFactory:
        output = self.options.output
        access = access_for(output, self.options.access)
        log.info(
            "spark.opening",
            output=output.describe(),
            auth=access.auth if access is not None else None,
            remotes=list(self.options.remotes) or None,
        )
        if self.excluded is not None:
            log.warning(
                "spark.output_container_left_out",
                container=self.excluded,
                account=output.account,
                why="the output lies in the monitored account: its own writes are left out of "
                "the tables and of `cfp verify`",
            )
        await ensure_container(output, self.options.access)
        try:
            await self.sink.__aenter__()
            if self.hints is not None:
                self.hints.use(*await hint_commit(self.sink.link, self.options))
        except PluginLoadError:
            raise
        except Exception as e:  # Spark's: storage unreachable, refused credentials...
            first = (str(e).strip().splitlines() or [repr(e)])[0][:1000]
            raise PluginLoadError(
                "spark", f"cannot open the tables at {output.describe()}: {first}"
            ) from e
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.hints is not None:
            await self.hints.aclose()
        await self.sink.__aexit__(exc_type, exc, tb)


def spark_options(settings: SparkSettings, host: PluginHost) -> SparkOptions:
    """The observer's settings from its options. Errors: `PluginLoadError` naming what is
    wrong: no output, an output that cannot be parsed, a Spark this install cannot open."""
    if not settings.output:
        raise PluginLoadError(
            "spark", "needs --output (and --spark-master or --spark-remote), or output=..."
        )
    output = parse_output(settings.output)
    remotes = parse_remotes(settings.spark_remote)
    require_pyspark(remote=remotes[0] if remotes else None)
    if settings.hints and settings.history:
        raise PluginLoadError(
            "spark",
            "the history table is not kept with hints yet (its versions would take provisional "
            "rows for the feed's): run with --no-history, or without --hints-queue",
        )
    try:
        access, feed = host.storage(settings.output_connection_string), host.storage(None)
    except ValueError as e:  # a malformed connection string: said without repeating it
        raise PluginLoadError("spark", f"--output-connection-string: {e}") from e
    return SparkOptions(
        output,
        access=access,
        feed=feed,
        master=settings.spark_master,
        remotes=remotes,
        conf=spark_conf(settings.spark_conf),
        wall=host.wall,
        warm_up_rows=settings.spark_warm_up_rows,
        max_rows=settings.spark_max_rows,
        max_wait_s=settings.spark_max_wait,
        state_every_s=settings.state_interval,
        keep_history=settings.history,
        hints=settings.hints,
        hints_state_every_s=settings.hints_state_interval,
        hints_confirm_within_s=settings.hints_confirm_within,
    )
