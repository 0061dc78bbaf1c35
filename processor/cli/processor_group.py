"""`cfp processor reset`: rewind (or forward) a paused processor whose hosts are stopped.

The decisions are `processor.admin.reset`'s; this reads the table, waits a lease expiry when
leases still name an owner (to tell a live host from a dead one), and writes.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import click

from leases import LeaseError
from processor import connection
from processor.cli.common import (
    IsoTime,
    connection_option,
    lease_connection_option,
    lease_table_option,
    processor_option,
    run_async,
    say_error,
)
from processor.host.timings import DEFAULT_EXPIRY_S
from processor.waiting import wait_any


@click.group("processor")
def processor_group() -> None:
    """Act on a whole processor (every lease of it) by hand."""


@processor_group.command("reset")
@connection_option
@lease_connection_option
@lease_table_option
@processor_option
@click.option("--start-time", type=IsoTime(), help="Deliver again from this time on.")
@click.option("--from-beginning", is_flag=True, help="Deliver again from the start of the feed.")
@click.option("--from-now", is_flag=True, help="Skip everything before now.")
@click.option("--reason", default="", help="Why, kept in every lease with the reset.")
@click.option(
    "--lease-expiration",
    type=click.FloatRange(min=0.5),
    help="How long a lease that still names an owner must go unrenewed to count as abandoned "
    f"(default: the hosts' own, from their rows; else {DEFAULT_EXPIRY_S:g} s).",
)
def reset_command(
    connection_string: str | None,
    lease_connection_string: str | None,
    lease_table: str,
    processor_name: str,
    start_time: datetime | None,
    from_beginning: bool,
    from_now: bool,
    reason: str,
    lease_expiration: float | None,
) -> None:
    """Reset every feed lease of a paused processor to a start time, the beginning of the feed,
    or now. Each lease's epoch is bumped (no old owner can checkpoint over the reset) and the
    reset is recorded in its moves. Refused (exit 2) unless the processor is paused (`cfp pause`)
    and no live host holds a lease: stop the hosts first (SIGTERM releases their leases), then
    start them again and `cfp resume`."""
    if sum([start_time is not None, from_beginning, from_now]) != 1:
        raise click.UsageError("give exactly one of --start-time, --from-beginning, --from-now")
    from processor.admin.reset import ResetTo, plan_reset, still_held  # noqa: PLC0415
    from processor.reading.identity import ProcessorIdentity  # noqa: PLC0415

    to = ResetTo.START_TIME if start_time else ResetTo.BEGINNING if from_beginning else ResetTo.NOW
    conn = connection.resolve(connection_string)

    async def main(stop: asyncio.Event) -> int:
        async with connection.lease_store(
            connection.resolve_other(lease_connection_string, conn),
            table=lease_table,
            processor=processor_name,
        ) as store:
            if not (await store.processor_state()).paused:
                say_error(
                    f"processor {processor_name!r} is not paused: `cfp pause` it, stop its "
                    "hosts, then reset"
                )
                return 2
            first = await store.list_leases()
            if not first:
                say_error(f"processor {processor_name!r} has no leases in table {lease_table!r}")
                return 2
            last = first
            if any(x.owner for x in first):
                hosts = await store.list_hosts()
                wait_s = lease_expiration or max(
                    (h.expiry_s for h in hosts if h.expiry_s > 0), default=DEFAULT_EXPIRY_S
                )
                click.echo(
                    f"leases still name an owner: watching them for {wait_s:g} s to tell a "
                    "live host from a dead one",
                    err=True,
                )
                if await wait_any(stop, timeout_s=wait_s * 1.1):
                    say_error("interrupted while watching the leases: nothing was reset")
                    return 130
                last = await store.list_leases()
                held = still_held(first, last)
                if held:
                    named = ", ".join(f"{x.token} by {x.owner}" for x in held)
                    say_error(
                        f"live hosts hold leases ({named}): stop the processor's hosts first "
                        "(SIGTERM: they release their leases), then reset"
                    )
                    return 2
            if not (await store.processor_state()).paused:
                say_error(f"processor {processor_name!r} was resumed meanwhile: nothing was reset")
                return 2
            stored = await store.identity()
            now = datetime.now(UTC)
            try:  # an unreadable identity row, or a start after the end: ValueErrors both
                end_time = (
                    ProcessorIdentity.from_text(
                        stored, where=f"processor {processor_name!r}"
                    ).end_time
                    if stored
                    else None
                )
                plan = plan_reset(
                    last, to, start_time=start_time, now=now, end_time=end_time, reason=reason
                )
            except ValueError as e:
                say_error(e)
                return 2
            for lease in plan.leases:
                done = await store.reset(lease, plan.position.to_json(), plan.move_of(lease, now))
                if done is None:
                    say_error(f"lease {lease.token} changed meanwhile: look and reset again")
                    return 1
                click.echo(f"lease {lease.token} reset (epoch {done.epoch})")
        click.echo(
            f"processor {processor_name!r}: {len(plan.leases)} lease(s) reset to "
            f"{plan.describe()}; start its hosts and `cfp resume` to deliver from there"
        )
        return 0

    async def reported(stop: asyncio.Event) -> int:
        try:
            return await main(stop)
        except LeaseError as e:
            say_error(e)
            return 1

    raise SystemExit(run_async(reported))
