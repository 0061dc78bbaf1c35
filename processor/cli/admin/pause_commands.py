"""`cfp pause` and `cfp resume`: stop and restart a whole processor without stopping its hosts.

The switch is the processor row of the lease table, so it outlives host restarts. Hosts read it at
every balancing tick: paused, each worker finishes the batch in hand, checkpoints what its
observer confirmed and waits, keeping (renewing) its lease; no lease moves, none is taken. A host
started while the processor is paused starts paused.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import click

from leases import LeaseError, ProcessorState
from processor import connection
from processor.cli.common import (
    PROCESSOR_OPTIONS,
    options,
    run_async,
    say_error,
)


def _set(
    conn_str: str | None,
    lease_conn: str | None,
    table: str,
    processor: str,
    *,
    paused: bool,
    reason: str,
) -> int:
    conn = connection.resolve(conn_str)

    async def main(stop: asyncio.Event) -> int:
        try:
            async with connection.lease_store(
                connection.resolve_other(lease_conn, conn), table=table, processor=processor
            ) as store:
                await store.open()
                before = await store.processor_state()
                await store.set_processor_state(
                    ProcessorState(paused=paused, since=datetime.now(UTC), reason=reason)
                )
        except LeaseError as e:
            say_error(e)
            return 1
        word = "paused" if paused else "resumed"
        already = " (it already was)" if before.paused == paused else ""
        click.echo(
            f"processor {processor!r} {word}{already}; its hosts follow at their next balancing "
            "tick (`cfp status` shows their states)"
        )
        return 0

    return run_async(main)


@click.command("pause")
@options(*PROCESSOR_OPTIONS)
@click.option("--reason", default="", help="Why, shown by `cfp status` and logged by the hosts.")
def pause_command(
    connection_string: str | None,
    lease_connection_string: str | None,
    lease_table: str,
    processor_name: str,
    reason: str,
) -> None:
    """Pause a processor: its hosts finish the batches in hand, checkpoint, and hold their leases
    idle until `cfp resume` (also across restarts)."""
    where = (connection_string, lease_connection_string, lease_table, processor_name)
    raise SystemExit(_set(*where, paused=True, reason=reason))


@click.command("resume")
@options(*PROCESSOR_OPTIONS)
def resume_command(
    connection_string: str | None,
    lease_connection_string: str | None,
    lease_table: str,
    processor_name: str,
) -> None:
    """Resume a paused processor: its hosts deliver again from their checkpoints."""
    where = (connection_string, lease_connection_string, lease_table, processor_name)
    raise SystemExit(_set(*where, paused=False, reason=""))
