"""`cfp status`: the hosts, jobs and leases of a processor, or its SDK continuation token."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from processor import connection
from processor.cli.common import (
    PROCESSOR_OPTIONS,
    options,
    run_async,
    say_error,
)

if TYPE_CHECKING:
    from leases import LeaseStore
    from processor.changefeed.catalog import FeedCatalog


@click.command("status")
@options(*PROCESSOR_OPTIONS)
@click.option("--json", "as_json", is_flag=True, help="One JSON document for machines.")
@click.option(
    "--sdk-token",
    is_flag=True,
    help="Print only a continuation token of the official SDKs (CursorVersion 1) for the "
    "processor's position: an SDK resumed from it misses nothing the leases have not delivered.",
)
def status_command(
    connection_string: str | None,
    lease_connection_string: str | None,
    lease_table: str,
    processor_name: str,
    as_json: bool,
    sdk_token: bool,
) -> None:
    """Show the hosts of a processor (state, leases, last heartbeat) and every lease: owner,
    epoch, position, last checkpoint, bytes left."""
    from leases import LeaseError  # noqa: PLC0415 - a command loads what it needs when it runs
    from processor.admin.report import (  # noqa: PLC0415
        processor_status,
        render_status,
        status_json,
    )
    from processor.changefeed.catalog import FeedCatalog  # noqa: PLC0415
    from processor.changefeed.errors import FeedError  # noqa: PLC0415
    from processor.changefeed.storage.feed_storage import FeedStorage  # noqa: PLC0415

    conn = connection.resolve(connection_string)

    async def main(stop: asyncio.Event) -> int:
        try:
            async with (
                connection.lease_store(
                    connection.resolve_other(lease_connection_string, conn),
                    table=lease_table,
                    processor=processor_name,
                ) as store,
                FeedStorage.from_connection_string(conn, attempts=3) as storage,
            ):
                if sdk_token:
                    return await _print_sdk_token(store, FeedCatalog(storage, refresh_s=0), conn)
                report = await processor_status(store, FeedCatalog(storage, refresh_s=0))
        except (LeaseError, FeedError) as e:
            say_error(e)
            return 1
        now = datetime.now(UTC)
        if as_json:
            doc = status_json(report, processor=processor_name, table=lease_table, now=now)
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(render_status(report, processor=processor_name, table=lease_table, now=now))
        if report.feed_error is not None:
            click.echo(f"cfp: the feed cannot be read: {report.feed_error}", err=True)
        parked = [r.lease.token for r in report.leases if r.lease.parked]
        if parked:
            click.echo(
                f"cfp: {len(parked)} lease(s) parked ({', '.join(parked)}): fix the cause, then "
                "`cfp lease resume TOKEN`, or skip the bad spot with `cfp lease move`",
                err=True,
            )
        return 0

    raise SystemExit(run_async(main))


async def _print_sdk_token(store: LeaseStore, catalog: FeedCatalog, conn: str) -> int:
    from processor.admin.processor_token import plan_sdk_position, sdk_feed_position  # noqa: PLC0415
    from processor.changefeed.errors import InvalidContinuation  # noqa: PLC0415
    from processor.changefeed.sdk_token import to_sdk_token, url_host  # noqa: PLC0415
    from processor.reading.lease_position import LeasePosition  # noqa: PLC0415

    positions: dict[str, LeasePosition] = {}
    for lease in await store.list_leases():
        try:
            positions[lease.token] = LeasePosition.from_json(lease.continuation, lease=lease.token)
        except InvalidContinuation as e:
            say_error(e)
            return 1
    plan = plan_sdk_position(positions)
    if plan is None:
        say_error("no lease has entered a segment yet: there is no position to hand over")
        return 1
    position = await sdk_feed_position(plan, catalog.shard_ends)
    click.echo(to_sdk_token(position, host=url_host(connection.parse(conn).blob_endpoint)))
    return 0
