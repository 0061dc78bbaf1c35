"""What `cfp processor reset` runs once its options are parsed: make sure the processor is paused
and no live host holds a lease (watching the leases for a lease expiry when one names an owner),
then plan the reset (`processor.admin.reset`) and write it, lease by lease."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import click

from leases import HostReport, Lease, LeaseError, LeaseStore, LeaseTable, ProcessorRows
from leases.policy.timings import DEFAULT_EXPIRY_S
from processor import connection
from processor.admin.reset import ResetPlan, ResetTo, plan_reset, still_held
from processor.cli.common import say_error
from processor.reading.processor_identity import ProcessorIdentity
from processor.waiting import wait_any


class Refused(Exception):
    """Why the reset stopped, for stderr, and its exit status: 2 when nothing was written (the
    processor is not ready to reset), 1 when a lease changed part way, 130 when interrupted."""

    def __init__(self, message: object, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def reset_to(start_time: datetime | None, *, from_beginning: bool, from_now: bool) -> ResetTo:
    """Where the flags send the leases; exactly one of them must be given."""
    if sum([start_time is not None, from_beginning, from_now]) != 1:
        raise click.UsageError("give exactly one of --start-time, --from-beginning, --from-now")
    return (
        ResetTo.START_TIME if start_time else ResetTo.BEGINNING if from_beginning else ResetTo.NOW
    )


def watch_for_s(asked_s: float | None, hosts: Iterable[HostReport]) -> float:
    """How long a lease that names an owner must go unrenewed before that owner counts as gone:
    as asked, else the longest lease expiry the hosts' rows give, else the default one."""
    return asked_s or max((h.expiry_s for h in hosts if h.expiry_s > 0), default=DEFAULT_EXPIRY_S)


@dataclass(frozen=True, slots=True)
class ResetJob:
    """One `cfp processor reset`, run once; `conn` is the feed's connection string, resolved."""

    conn: str
    lease_conn: str | None
    table: str
    processor: str
    to: ResetTo
    start_time: datetime | None
    reason: str
    lease_expiration: float | None

    async def run(self, stop: asyncio.Event) -> int:
        """Reset every feed lease of the processor, or refuse and say why; the exit status.
        `stop` interrupts the watch of owned leases (exit 130, nothing written)."""
        try:
            async with connection.lease_store(
                connection.resolve_other(self.lease_conn, self.conn),
                table=self.table,
                processor=self.processor,
            ) as store:
                plan = await self.reset(store, stop)
        except Refused as e:
            say_error(e)
            return e.status
        except LeaseError as e:
            say_error(e)
            return 1
        click.echo(
            f"processor {self.processor!r}: {len(plan.leases)} lease(s) reset to "
            f"{plan.describe()}; start its hosts and `cfp resume` to deliver from there"
        )
        return 0

    async def reset(self, store: LeaseStore, stop: asyncio.Event) -> ResetPlan:
        """The reset on an open store (`run` opens the table's): only when the processor is
        paused, no live host owns a lease, and it is still paused after the watch (a resume
        meanwhile wins). Errors: `Refused`, `LeaseError`."""
        if not (await store.processor_state()).paused:
            raise Refused(
                f"processor {self.processor!r} is not paused: `cfp pause` it, stop its "
                "hosts, then reset"
            )
        leases = await store.list_leases()
        if not leases:
            raise Refused(f"processor {self.processor!r} has no leases in table {self.table!r}")
        if any(x.owner for x in leases):
            leases = await self._watch_owners(store, leases, stop)
        if not (await store.processor_state()).paused:
            raise Refused(f"processor {self.processor!r} was resumed meanwhile: nothing was reset")
        now = datetime.now(UTC)
        plan = await self._plan(store, leases, now)
        await _write(store, plan, now)
        return plan

    async def _watch_owners(
        self, store: LeaseStore, first: list[Lease], stop: asyncio.Event
    ) -> list[Lease]:
        """The leases again after a lease expiry, when no live host renewed or took one
        meanwhile: a live owner renews well within its expiry, a dead one leaves its row as it
        was."""
        wait_s = watch_for_s(self.lease_expiration, await store.list_hosts())
        click.echo(
            f"leases still name an owner: watching them for {wait_s:g} s to tell a "
            "live host from a dead one",
            err=True,
        )
        if await wait_any(stop, timeout_s=wait_s * 1.1):
            raise Refused("interrupted while watching the leases: nothing was reset", 130)
        last = await store.list_leases()
        held = still_held(first, last)
        if held:
            named = ", ".join(f"{x.token} by {x.owner}" for x in held)
            raise Refused(
                f"live hosts hold leases ({named}): stop the processor's hosts first "
                "(SIGTERM: they release their leases), then reset"
            )
        return last

    async def _plan(self, store: ProcessorRows, leases: list[Lease], now: datetime) -> ResetPlan:
        """The reset, kept within the processor's end time (from its identity row)."""
        stored = await store.identity()
        try:  # an unreadable identity row, or a start after the end: ValueErrors both
            end_time = (
                ProcessorIdentity.from_text(stored, where=f"processor {self.processor!r}").end_time
                if stored
                else None
            )
            return plan_reset(
                leases,
                self.to,
                start_time=self.start_time,
                now=now,
                end_time=end_time,
                reason=self.reason,
            )
        except ValueError as e:
            raise Refused(e) from None


async def _write(store: LeaseTable, plan: ResetPlan, now: datetime) -> None:
    """Each lease of the plan, conditionally on the row read; a lease that changed since stops
    the reset part way (the operator looks, then resets again)."""
    for lease in plan.leases:
        done = await store.reset(lease, plan.position.to_json(), plan.move_of(lease, now))
        if done is None:
            raise Refused(f"lease {lease.token} changed meanwhile: look and reset again", 1)
        click.echo(f"lease {lease.token} reset (epoch {done.epoch})")
