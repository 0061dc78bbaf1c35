"""The `cfp` command line: `read` and `emulate` here, `run` and `status` from `cli_host`,
`verify`, `sql` and `spark-connect` from `cli_spark`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from contextlib import aclosing
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import click

from processor import connection
from processor.changefeed.emulator.emulator import Emulator, EmulatorConfig
from processor.changefeed.emulator.service import open_service, reset_account
from processor.changefeed.errors import FeedError
from processor.changefeed.feed_reader import FeedReader, IncompleteRead
from processor.changefeed.output import json_lines
from processor.changefeed.position import FeedPosition
from processor.changefeed.selection import EventFilter, TimeRange
from processor.changefeed.storage import FeedStorage
from processor.cli_common import ByteSize, IsoTime, connection_option, fail, run_async, say_error
from processor.cli_host import run_command, status_command
from processor.cli_lease import lease_group
from processor.cli_processor import pause_command, resume_command
from processor.cli_spark import spark_connect_command, sql_command, verify_command
from processor.logs import configure_logging
from processor.runtime import tune_gc

T = TypeVar("T")
SAVE_EVERY_S = 1.0


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--log-level", default="INFO", envvar="CFP_LOG_LEVEL", show_default=True)
@click.option(
    "--log-json/--log-console",
    default=None,
    envvar="CFP_LOG_JSON",
    help="Log JSON lines or console lines on stderr (default: JSON unless stderr is a terminal).",
)
def main(log_level: str, log_json: bool | None) -> None:
    """cfp: a lease-coordinated host for the Azure Blob Storage change feed."""
    configure_logging(
        level=log_level, json_lines=not sys.stderr.isatty() if log_json is None else log_json
    )


def _load_continuation(value: str | None, account: str) -> FeedPosition | None:
    if value is None:
        return None
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.exists():
            fail(f"continuation file {path} does not exist", 2)
        value = path.read_text()
    return FeedPosition.from_token(value.strip(), account=account)


def _save_continuation(path: Path, position: FeedPosition, account: str) -> None:
    """Write atomically: a crash leaves either the old token or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(position.to_token(account=account) + "\n")
    os.replace(tmp, path)


@main.command()
@connection_option
@click.option("--start-time", type=IsoTime(), help="Only events at or after this time.")
@click.option("--end-time", type=IsoTime(), help="Only events before this time.")
@click.option(
    "--event-type", "event_types", multiple=True, help="Only these event types (repeatable)."
)
@click.option("--continuation", help="Resume from a token, or @FILE holding one.")
@click.option(
    "--save-continuation",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the position after the last printed event to FILE.",
)
@click.option("--max-events", type=click.IntRange(min=1), help="Stop after N events.")
@click.option("--follow", is_flag=True, help="Keep polling for new events until interrupted.")
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
@click.option("--include-control", is_flag=True, help="Also print internal Control records.")
@click.option(
    "--read-size",
    type=ByteSize(),
    default="8MiB",
    show_default=True,
    help="Largest ranged GET per chunk read.",
)
def read(
    connection_string: str | None,
    start_time: datetime | None,
    end_time: datetime | None,
    event_types: tuple[str, ...],
    continuation: str | None,
    save_continuation: Path | None,
    max_events: int | None,
    follow: bool,
    poll_interval: float,
    include_control: bool,
    read_size: int,
) -> None:
    """Print change feed events as JSON lines, in per-blob order.

    Exits 0 once everything consumable (up to lastConsumable) has been read, or keeps polling
    with --follow until SIGINT/SIGTERM. Errors go to stderr with a non-zero exit.
    """
    tune_gc()
    conn = connection.resolve(connection_string)
    try:
        account = connection.parse(conn).account
    except ValueError as e:
        fail(str(e), 2)
    try:
        position = _load_continuation(continuation, account)
    except FeedError as e:
        fail(str(e), 2)
    event_filter = EventFilter(
        event_types=frozenset(event_types),
        window=TimeRange(start_time, end_time),
        include_control=include_control,
    )

    async def run(stop: asyncio.Event) -> int:
        out = sys.stdout.buffer
        printed = 0
        last_save = time.monotonic()
        async with (
            FeedStorage.from_connection_string(conn) as storage,
            FeedReader(
                storage, position=position, event_filter=event_filter, read_size=read_size
            ) as reader,
        ):
            done = reader.position

            def save(pos: FeedPosition) -> None:
                out.flush()  # events first: a saved position never runs ahead of the output
                if save_continuation is not None:
                    _save_continuation(save_continuation, pos, account)

            try:
                batches = reader.batches(follow=follow, poll_interval_s=poll_interval, stop=stop)
                async with aclosing(batches):
                    async for batch in batches:
                        records = batch.records
                        if max_events is not None and printed + len(records) >= max_events:
                            take = max_events - printed
                            out.write(json_lines(records[:take]))
                            printed += take
                            done = reader.position_after(batch, take - 1)
                            break
                        out.write(json_lines(records))
                        printed += len(records)
                        done = reader.position
                        if time.monotonic() - last_save >= SAVE_EVERY_S:
                            save(done)
                            last_save = time.monotonic()
                    else:
                        done = reader.position
            except IncompleteRead as e:
                for f in e.failures:
                    say_error(f"shard {f.shard}: {f.error}")
                click.echo(
                    f"cfp: read {printed} events; the position stops before the bad data", err=True
                )
                return 1
            except FeedError as e:
                say_error(e)
                return 1
            finally:
                save(done)
        return 0

    raise SystemExit(run_async(run))


@main.command()
@connection_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload.")
@click.option(
    "--start-time",
    type=IsoTime(),
    help="Begin of the first segment (default 2026-01-01T00:00Z, or after the newest one).",
)
@click.option("--segments", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--events-per-segment", type=click.IntRange(min=1), default=500, show_default=True)
@click.option(
    "--shards", default="2,3,1", show_default=True, help="Shard counts per segment, cycled."
)
@click.option(
    "--schema-version", type=click.Choice(["1", "3", "4", "5", "6"]), default="5", show_default=True
)
@click.option(
    "--block-events", default="1-60", show_default=True, help="Events per Avro block, LOW-HIGH."
)
@click.option(
    "--chunk-size",
    type=ByteSize(),
    default="4MiB",
    show_default=True,
    help="Roll a chunk over past this size.",
)
@click.option("--containers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--blobs-per-container", type=click.IntRange(min=1), default=200, show_default=True)
@click.option(
    "--control-every",
    type=click.IntRange(min=0),
    default=250,
    show_default=True,
    help="Mix in a Control record every N events (0: only at segment ends).",
)
@click.option("--concurrency", type=click.IntRange(min=1, max=256), default=32, show_default=True)
@click.option("--leave-last-publishing", is_flag=True, help="Do not finalize the last segment.")
@click.option("--live", is_flag=True, help="Keep appending in real time until interrupted.")
@click.option(
    "--finish",
    is_flag=True,
    help="Live: finalize the open segment on stop (everything written becomes consumable).",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1),
    default=20.0,
    show_default=True,
    help="Live: operations per second.",
)
@click.option(
    "--segment-seconds",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Live: real seconds one virtual hourly segment lasts.",
)
@click.option(
    "--duration", type=click.FloatRange(min=0), help="Live: stop after this many seconds."
)
@click.option("--reset", is_flag=True, help="Delete the emulated containers and the feed first.")
def emulate(
    connection_string: str | None,
    seed: int,
    start_time: datetime | None,
    segments: int,
    events_per_segment: int,
    shards: str,
    schema_version: str,
    block_events: str,
    chunk_size: int,
    containers: int,
    blobs_per_container: int,
    control_every: int,
    concurrency: int,
    leave_last_publishing: bool,
    live: bool,
    finish: bool,
    rate: float,
    segment_seconds: float,
    duration: float | None,
    reset: bool,
) -> None:
    """Perform real blob operations against Azurite and write their change feed.

    Refuses any endpoint that is not on the loopback interface.
    """
    try:
        lo, _, hi = block_events.partition("-")
        config = EmulatorConfig(
            seed=seed,
            start_time=start_time,
            segments=segments,
            events_per_segment=events_per_segment,
            shards=tuple(int(s) for s in shards.split(",")),
            schema_version=int(schema_version),
            block_events=(int(lo), int(hi or lo)),
            chunk_bytes=chunk_size,
            containers=containers,
            blobs_per_container=blobs_per_container,
            control_every=control_every,
            concurrency=concurrency,
            finalize_last=not leave_last_publishing,
        )
    except ValueError as e:
        fail(str(e), 2)
    conn = connection.resolve(connection_string)

    async def run(stop: asyncio.Event) -> int:
        try:
            async with open_service(conn) as service:
                emulator = Emulator(service, config)
                if reset:
                    await reset_account(service, emulator.containers)
                if live:
                    if duration is not None:
                        asyncio.get_running_loop().call_later(duration, stop.set)
                    summary = await emulator.run_live(
                        stop, rate_per_s=rate, segment_seconds=segment_seconds, finish=finish
                    )
                else:
                    summary = await emulator.run_batch()
        except FeedError as e:
            say_error(e)
            return 1
        click.echo(
            json.dumps(
                {
                    "segments": summary.segments,
                    "events": dict(sorted(summary.events.items())),
                    "controlRecords": summary.control_records,
                    "liveBlobs": summary.live_blobs,
                },
                indent=2,
            )
        )
        return 0

    raise SystemExit(run_async(run))


main.add_command(run_command)
main.add_command(status_command)
main.add_command(lease_group)
main.add_command(pause_command)
main.add_command(resume_command)
main.add_command(verify_command)
main.add_command(sql_command)
main.add_command(spark_connect_command)
