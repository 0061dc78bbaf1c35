"""`cfp emulate --live`'s options: the pace of a live run, the Blob Storage events Event Grid
would write into a queue and their faults, and how long the feed's records take to appear."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from processor import connection
from processor.changefeed.errors import UnsafeEndpoint
from processor.cli.common import Options, bundled

if TYPE_CHECKING:
    from processor.emulator.hint_publisher import HintPublisher

FAULTS = ("drop", "duplicate", "late", "reorder", "poison")
_FAULT_HELP = {
    "drop": "never delivered",
    "duplicate": "delivered twice",
    "late": "delivered only after the feed's record",
    "reorder": "held back up to 3 s (later events overtake them)",
    "poison": "with a bad message beside them",
}

LIVE_OPTIONS: Options = (
    click.option("--live", is_flag=True, help="Keep appending in real time until interrupted."),
    click.option(
        "--finish",
        is_flag=True,
        help="Live: finalize the open segment on stop (everything written becomes consumable).",
    ),
    click.option(
        "--rate",
        type=click.FloatRange(min=0.1),
        default=20.0,
        show_default=True,
        help="Live: operations per second.",
    ),
    click.option(
        "--segment-seconds",
        type=click.FloatRange(min=1),
        default=60.0,
        show_default=True,
        help="Live: real seconds one virtual hourly segment lasts.",
    ),
    click.option(
        "--duration", type=click.FloatRange(min=0), help="Live: stop after this many seconds."
    ),
    click.option(
        "--hints-queue",
        help="Live: write each operation's Blob Storage event into this Azurite queue, as an "
        "Event Grid subscription would (created if missing; `cfp run --hints-queue` reads it).",
    ),
    click.option(
        "--hints-schema",
        type=click.Choice(["eventgrid", "cloudevents"]),
        default="eventgrid",
        show_default=True,
        help="--hints-queue: the subscription's delivery schema.",
    ),
    click.option(
        "--hints-raw-json",
        is_flag=True,
        help="--hints-queue: bodies as JSON text instead of Base64 (seen on some subscriptions).",
    ),
    click.option(
        "--publish-delay",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        help="Live: a record reaches the feed this many seconds after its operation (released "
        "every 3 s), as Azure's appear minutes late. With it or --hints-queue, event times are "
        "the wall clock's and a segment is a real hour (--segment-seconds is ignored).",
    ),
    *(
        click.option(
            f"--hint-{name}",
            type=click.FloatRange(min=0, max=1),
            default=0.0,
            show_default=True,
            help=f"--hints-queue: the share of events {_FAULT_HELP[name]}.",
        )
        for name in FAULTS
    ),
)


@dataclass(frozen=True, slots=True)
class LiveRun:
    """What the live options say."""

    live: bool
    finish: bool
    rate: float
    segment_seconds: float
    duration: float | None
    hints_queue: str | None
    hints_schema: str
    hints_raw_json: bool
    publish_delay: float
    hint_drop: float
    hint_duplicate: float
    hint_late: float
    hint_reorder: float
    hint_poison: float

    @property
    def wall_clock(self) -> bool:
        """Whether the run keeps Azure's time: real hours, event times when they happened."""
        return bool(self.hints_queue) or self.publish_delay > 0

    def check(self) -> None:
        """Errors: `click.UsageError` for hints or a delay outside a live run."""
        if self.wall_clock and not self.live:
            raise click.UsageError("--hints-queue and --publish-delay need --live")


live_run = bundled("live", LiveRun, *LIVE_OPTIONS)


@contextlib.asynccontextmanager
async def hint_publisher(
    conn: str, hints: LiveRun, seed: int
) -> AsyncIterator[HintPublisher | None]:
    """The publisher `hints` asks for (None: no queue), its queue made if missing; on the way
    out, what it still holds is sent. Errors: `UnsafeEndpoint` off loopback."""
    if not hints.hints_queue:
        yield None
        return
    from azure.core.exceptions import ResourceExistsError  # noqa: PLC0415

    from processor.emulator.hint_publisher import (  # noqa: PLC0415
        HintFaults,
        HintPublisher,
        HintStyle,
    )

    endpoint = connection.parse(conn).queue_endpoint
    if not connection.is_loopback_endpoint(endpoint):
        raise UnsafeEndpoint(
            f"refusing to write hints to {endpoint}: only loopback endpoints (Azurite) may "
            "receive emulated events"
        )
    faults: dict[str, Any] = {name: getattr(hints, f"hint_{name}") for name in FAULTS}
    async with connection.queue_client(conn, hints.hints_queue) as queue:
        with contextlib.suppress(ResourceExistsError):
            await queue.create_queue()
        publisher = HintPublisher(
            queue,
            random.Random(seed + 1),
            faults=HintFaults(**faults),
            style=HintStyle(
                cloud_events=hints.hints_schema == "cloudevents", encoded=not hints.hints_raw_json
            ),
            feed_delay_s=hints.publish_delay,
        )
        try:
            yield publisher
        finally:
            await publisher.aclose()
