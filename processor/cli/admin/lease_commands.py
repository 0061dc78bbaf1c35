"""`cfp lease move` and `cfp lease resume`: an operator's hand on a stopped lease.

A lease parks itself in front of data it cannot read (or a batch the observer refused, with
`--on-observer-error stop`) and waits there. `resume` lets hosts try again at the same spot (the
cause was fixed outside); `move` skips the bad spot explicitly and records in the lease that it
did, from where to where and how many bytes of the feed it jumped over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from leases import Lease, LeaseError, LeaseMove, LeaseToken
from processor import connection
from processor.admin.lease_moves import Past, plan_move
from processor.changefeed.errors import FeedError
from processor.cli.common import ProcessorAddress, processor_address, run_async, say_error
from processor.reading.lease_position import LeasePosition

if TYPE_CHECKING:
    from leases import TableLeaseStore


@click.group("lease")
def lease_group() -> None:
    """Act on one lease of a processor by hand (one that no host holds)."""


def _stopped(lease: Lease | None, token: str) -> Lease:
    """The lease, when no host holds it; otherwise a clear refusal."""
    if lease is None:
        raise click.ClickException(f"lease {token}: no such lease")
    if lease.owner is not None:
        raise click.ClickException(
            f"lease {token} is held by {lease.owner} (epoch {lease.epoch}): only a parked or "
            "free lease is moved or resumed by hand"
        )
    return lease


def _store(where: ProcessorAddress, conn: str) -> TableLeaseStore:
    """The processor's lease store; `conn`: the feed account's (`where.conn`)."""
    return connection.lease_store(
        connection.resolve_other(where.lease_connection_string, conn),
        table=where.lease_table,
        processor=where.processor_name,
    )


@lease_group.command("move")
@processor_address
@click.argument("token")
@click.option(
    "--past",
    type=click.Choice([p.value for p in Past]),
    help="Skip the bad block (to the next intact sync marker), the whole chunk, or the rest of "
    "the shard's segment.",
)
@click.option("--to", "to", help="Or: set this continuation (as `cfp status --json` shows one).")
@click.option("--reason", default="", help="Why, kept in the lease with the move.")
def move_command(
    where: ProcessorAddress,
    token: str,
    past: str | None,
    to: str | None,
    reason: str,
) -> None:
    """Move a parked or free lease past a bad spot; the lease records the move."""
    if (past is None) == (to is None):
        raise click.UsageError("give exactly one of --past and --to")
    from processor.changefeed.catalog import FeedCatalog  # noqa: PLC0415 - loaded when run
    from processor.changefeed.storage.feed_storage import FeedStorage  # noqa: PLC0415
    from processor.reading.backlog import bytes_left  # noqa: PLC0415

    conn = where.conn

    async def main(stop: asyncio.Event) -> int:
        async with (
            _store(where, conn) as store,
            FeedStorage.from_connection_string(conn, attempts=3) as storage,
        ):
            lease = _stopped(await store.get(LeaseToken(token)), token)
            before = LeasePosition.from_json(lease.continuation, lease=token)
            if to is not None:
                after = LeasePosition.from_json(to, lease=token)
            else:
                assert past is not None
                after = await plan_move(storage, before, Past(past))
            if after.is_before(before):
                raise click.ClickException(f"lease {token}: the move would go backwards")
            catalog = FeedCatalog(storage, refresh_s=0)
            segments = await catalog.segments(max_age_s=0)
            skipped = await bytes_left(catalog, token, before, segments) - await bytes_left(
                catalog, token, after, segments
            )
            move = LeaseMove(
                at=datetime.now(UTC),
                before=lease.continuation,
                after=after.to_json(),
                skipped_bytes=max(0, skipped),
                reason=reason,
                error=lease.error,
            )
            if await store.move(lease, move.after, move) is None:
                raise click.ClickException(f"lease {token} changed meanwhile: look and try again")
        click.echo(
            f"lease {token} moved from {lease.continuation} to {move.after} "
            f"({move.skipped_bytes} bytes of the feed skipped)"
        )
        return 0

    raise SystemExit(run_async(_reported(main)))


@lease_group.command("resume")
@processor_address
@click.argument("tokens", nargs=-1)
@click.option("--all-parked", is_flag=True, help="Every parked lease of the processor.")
def resume_command(
    where: ProcessorAddress,
    tokens: tuple[str, ...],
    all_parked: bool,
) -> None:
    """Let hosts take parked leases again where they stopped (after fixing the cause)."""
    if bool(tokens) == all_parked:
        raise click.UsageError("give lease tokens or --all-parked")
    conn = where.conn

    async def main(stop: asyncio.Event) -> int:
        async with _store(where, conn) as store:
            if all_parked:
                leases = [x for x in await store.list_leases() if x.parked]
            else:
                leases = [_stopped(await store.get(LeaseToken(t)), t) for t in tokens]
            for lease in leases:
                if await store.resume(_stopped(lease, lease.token)) is None:
                    raise click.ClickException(
                        f"lease {lease.token} changed meanwhile: look and try again"
                    )
                click.echo(f"lease {lease.token} resumed at {lease.continuation}")
        if not leases:
            click.echo("no parked lease")
        return 0

    raise SystemExit(run_async(_reported(main)))


def _reported(
    main: Callable[[asyncio.Event], Awaitable[int]],
) -> Callable[[asyncio.Event], Coroutine[Any, Any, int]]:
    """Store and feed errors as one `cfp: error:` line and exit 1 (usage problems exit 1 too)."""

    async def wrapped(stop: asyncio.Event) -> int:
        try:
            return await main(stop)
        except (LeaseError, FeedError) as e:
            say_error(e)
            return 1

    return wrapped
