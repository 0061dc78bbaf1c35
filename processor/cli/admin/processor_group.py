"""`cfp processor reset`: rewind (or forward) a paused processor whose hosts are stopped.

The decisions are `processor.admin.reset`'s; `reset_job.py` reads the table, waits a lease expiry
when leases still name an owner (to tell a live host from a dead one), and writes.
"""

from __future__ import annotations

from datetime import datetime

import click

from leases.policy.timings import DEFAULT_EXPIRY_S
from processor.cli.common import IsoTime, ProcessorAddress, processor_address, run_async


@click.group("processor")
def processor_group() -> None:
    """Act on a whole processor (every lease of it) by hand."""


@processor_group.command("reset")
@processor_address
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
    where: ProcessorAddress,
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
    from processor.cli.admin.reset_job import ResetJob, reset_to  # noqa: PLC0415 - when run

    to = reset_to(start_time, from_beginning=from_beginning, from_now=from_now)
    job = ResetJob(
        conn=where.conn,
        lease_conn=where.lease_connection_string,
        table=where.lease_table,
        processor=where.processor_name,
        to=to,
        start_time=start_time,
        reason=reason,
        lease_expiration=lease_expiration,
    )
    raise SystemExit(run_async(job.run))
