"""`cfp emulate`: real blob operations against Azurite, and the change feed they would give."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import click

from processor import connection
from processor.changefeed.errors import FeedError
from processor.cli.common import ByteSize, IsoTime, connection_option, fail, run_async, say_error
from processor.cli.emulate_live import LiveRun, hint_publisher, live_run

if TYPE_CHECKING:
    from processor.emulator.emulator import EmulatorConfig


@click.command("emulate")
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
@click.option("--reset", is_flag=True, help="Delete the emulated containers and the feed first.")
@click.option(
    "--feed-only",
    is_flag=True,
    help="Write the change feed alone, with made-up ETags; no blob is touched (4x faster).",
)
@live_run
def emulate_command(
    connection_string: str | None, reset: bool, live: LiveRun, **workload: Any
) -> None:
    """Perform real blob operations against Azurite and write their change feed.

    Refuses any endpoint that is not on the loopback interface.
    """
    from processor.emulator.emulator import Emulator  # noqa: PLC0415 - loaded when run
    from processor.emulator.service import open_service, reset_account  # noqa: PLC0415

    try:
        config = _config(workload)
    except ValueError as e:
        fail(str(e), 2)
    live.check()
    conn = connection.resolve(connection_string)

    async def run(stop: asyncio.Event) -> int:
        try:
            async with (
                open_service(conn) as service,
                hint_publisher(conn, live, config.seed) as publisher,
            ):
                emulator = Emulator(
                    service, config, hints=publisher, publish_delay_s=live.publish_delay
                )
                if reset:
                    await reset_account(service, emulator.containers)
                if not live.live:
                    summary = await emulator.run_batch()
                else:
                    if live.duration is not None:
                        asyncio.get_running_loop().call_later(live.duration, stop.set)
                    summary = await emulator.run_live(
                        stop,
                        rate_per_s=live.rate,
                        segment_seconds=live.segment_seconds,
                        finish=live.finish,
                        wall_clock=live.wall_clock,
                    )
        except FeedError as e:
            say_error(e)
            return 1
        doc = summary.to_json()
        if publisher is not None:
            doc["hints"] = publisher.to_json()
        click.echo(json.dumps(doc, indent=2))
        return 0

    raise SystemExit(run_async(run))


def _config(workload: dict[str, Any]) -> EmulatorConfig:
    """The emulator's settings from the workload's options: five take another form, the others
    (seed, start time, segments, events per segment, containers, blobs per container, control
    records, concurrency, feed only) go as given. Errors: `ValueError` naming the bad one."""
    from processor.emulator.emulator import EmulatorConfig  # noqa: PLC0415

    given = dict(workload)
    lo, _, hi = given.pop("block_events").partition("-")
    return EmulatorConfig(
        shards=tuple(int(s) for s in given.pop("shards").split(",")),
        schema_version=int(given.pop("schema_version")),
        block_events=(int(lo), int(hi or lo)),
        chunk_bytes=given.pop("chunk_size"),
        finalize_last=not given.pop("leave_last_publishing"),
        **given,
    )
