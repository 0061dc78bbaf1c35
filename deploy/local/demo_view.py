"""The live terminal view of `make demo`: hosts, leases, positions, lag, events/s and freshness.

Everything shown comes from where an operator would look: the lease table (leases and the hosts'
own rows), each host's `/status` endpoint, found through its row, and the Delta tables (read
with the `deltalake` package). On a terminal it redraws in place (rich `Live`); otherwise it
prints a snapshot every 30 s.

Freshness is an age against this machine's clock: a host's events when its observer accepted
them (`/status` `freshness`: p50/p99 of the feed's and of the hints'), each lease's newest
event, and the newest event in the change log (the feed's alone) and in the state table (the
feed's and the hints'), with its provisional rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from leases import HostReport, Lease, TableLeaseStore
from leases.errors import LeaseError
from processor.admin.report import describe_position, parse_position, size_text


@dataclass(frozen=True)
class TablesNow:
    """The newest event time in the change log and in the state table (None: no rows yet), and
    the state table's provisional rows."""

    changes: datetime | None = None
    state: datetime | None = None
    provisional: int = 0


@dataclass
class Snapshot:
    at: float
    leases: list[Lease]
    hosts: list[HostReport]
    status: dict[str, dict[str, Any]]  # host name -> its /status document
    tables: TablesNow | None = None

    def host_events(self) -> dict[str, int]:
        return {name: int(doc.get("events", 0)) for name, doc in self.status.items()}

    def lease_status(self, token: str) -> dict[str, Any]:
        for doc in self.status.values():
            for x in doc.get("leases", []):
                if x["lease"] == token:
                    return dict(x)
        return {}


@dataclass
class Rates:
    """Events/s per host over the last `window_s` seconds, and events delivered by every host
    process seen (a killed host's count is kept). A Spark host's count moves once per commit,
    every few seconds: the window spans several commits (and, in a log file, the time between
    two printed frames)."""

    window_s: float = 10.0
    history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    latest: dict[str, int] = field(default_factory=dict)

    def update(self, snap: Snapshot) -> None:
        for name, events in snap.host_events().items():
            points = [p for p in self.history.get(name, []) if snap.at - p[0] <= self.window_s]
            points.append((snap.at, events))
            self.history[name] = points
            (t0, e0), (t1, e1) = points[0], points[-1]
            self.rates[name] = (e1 - e0) / (t1 - t0) if t1 > t0 and e1 >= e0 else 0.0
            self.latest[name] = events
        for name in set(self.rates) - set(snap.host_events()):
            self.rates[name] = 0.0  # gone (killed, or drained)

    def total(self) -> float:
        return sum(self.rates.values())

    def delivered(self) -> int:
        return sum(self.latest.values())


async def take_snapshot(store: TableLeaseStore, http: aiohttp.ClientSession) -> Snapshot:
    leases = await store.list_leases()
    hosts = await store.list_hosts()
    status: dict[str, dict[str, Any]] = {}

    async def fetch(h: HostReport) -> None:
        if not h.endpoint:
            return
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with http.get(f"{h.endpoint}/status", timeout=aiohttp.ClientTimeout(1)) as r:
                status[h.name] = await r.json()

    await asyncio.gather(*(fetch(h) for h in hosts))
    return Snapshot(time.monotonic(), leases, hosts, status)


def render(
    snap: Snapshot,
    rates: Rates,
    *,
    headline: str,
    notes: list[str],
    distinct: int | None = None,
    final: bool = False,
) -> Group:
    """The frame; `distinct`: events in the change log (each once), when known; `final`: every
    delivery is in the change log by now, so the deliveries beyond it were repeats."""
    hosts = Table(title="hosts", title_justify="left", expand=False)
    for col in ("host", "state", "leases", "events/s", "feed age p50/p99", "hint age p50/p99"):
        hosts.add_column(col, justify="left" if col in ("host", "state") else "right")
    now = datetime.now(UTC)
    owned = Counter(x.owner for x in snap.leases if x.owner)  # as the table says, not the host
    for h in sorted(snap.hosts, key=lambda h: h.name):
        silent = h.silent_s(now) > h.expiry_s
        said = h.state + (f" ({h.note})" if h.note else "")  # why it holds nothing, say
        state = f"silent {h.silent_s(now):.0f}s (said {h.state})" if silent else said
        style = "red" if silent else {"running": "green", "draining": "yellow"}.get(h.state, "red")
        hosts.add_row(
            h.name,
            Text(state, style=style),
            str(owned[h.name]),
            f"{rates.rates.get(h.name, 0):,.0f}",
            *(_ages(snap.status.get(h.name, {}), source) for source in ("feed", "hint")),
        )
    leases = Table(title="leases", title_justify="left")
    right = ("epoch", "lag", "newest event", "left")
    for col in ("lease", "owner", "epoch", "segment", "position", "lag", "newest event", "left",
                "state"):  # fmt: skip
        leases.add_column(col, justify="right" if col in right else "left")
    for x in sorted(snap.leases, key=lambda x: x.token):
        segment, where = describe_position(parse_position(x))
        live = snap.lease_status(x.token)
        lag = f"{live['lagSeconds']:,.0f}s" if live.get("lagSeconds") is not None else "-"
        state = "caught up" if x.caught_up else ("reading" if x.owner else "free")
        if x.owner and not x.caught_up and live.get("events") and not live.get("lastCheckpoint"):
            # delivered, not yet checkpointed: a Spark host checkpoints after its commit
            state = f"reading, {live['events']:,} delivered, no checkpoint yet"
        leases.add_row(
            x.token,
            x.owner or "-",
            str(x.epoch),
            segment,
            where,
            lag,
            _age_of(x.last_event_time, now),
            size_text(live.get("lagBytes")) if live else "-",
            Text(state, style="green" if x.caught_up else "cyan"),
        )
    total = rates.delivered()
    said = f"{headline}   deliveries {total:,} ({rates.total():,.0f}/s)"
    if distinct is not None and final:
        again = max(0, total - distinct)
        said += f", change log {distinct:,} distinct events ({again:,} deliveries were repeats)"
    elif distinct is not None:  # a Spark host counts a delivery before its commit lands
        said += f", change log {distinct:,} distinct events so far"
    head = Text(said)
    fresh = Text(_tables_line(snap.tables, now))
    return Group(head, fresh, hosts, leases, *(Text(n, style="bold") for n in notes[-6:]))


def _age_of(at: datetime | None, now: datetime) -> str:
    """How old an event time is, as `3.2s` ("-": none)."""
    return "-" if at is None else _s(max(0.0, (now - at).total_seconds()))


def _s(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 100 else f"{seconds:,.0f}s"


def _ages(status: dict[str, Any], source: str) -> str:
    """A host's recent events' ages when accepted, from one source, as `p50/p99`."""
    ages = (status.get("freshness") or {}).get(source)
    return f"{_s(ages['p50'])}/{_s(ages['p99'])}" if ages else "-"


def _tables_line(tables: TablesNow | None, now: datetime) -> str:
    if tables is None or tables.changes is None:
        return "freshness: no rows in the tables yet"
    return (
        f"freshness: newest event in the change log {_age_of(tables.changes, now)} old (the "
        f"feed), in the state table {_age_of(tables.state, now)} old ({tables.provisional:,} "
        "provisional rows: hints the feed has not confirmed yet)"
    )


class View:
    """Redraw on a terminal, or print a snapshot every `every_s` elsewhere (the demo's events
    are printed once each there, as they happen, not with every snapshot)."""

    def __init__(self, console: Console, *, every_s: float = 30.0) -> None:
        self.console = console
        self.every_s = every_s
        self._printed_at: float | None = None  # the first snapshot is always printed
        self._live: Any = None

    def __enter__(self) -> View:
        if self.console.is_terminal:
            from rich.live import Live  # noqa: PLC0415

            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def notes_to_draw(self, notes: list[str]) -> list[str]:
        """The demo's notes to draw under the tables: on a terminal only (elsewhere each is
        printed once, as it happens)."""
        return notes if self._live is not None else []

    def show(self, renderable: Group, *, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(renderable)
        elif (
            force or self._printed_at is None or time.monotonic() - self._printed_at >= self.every_s
        ):
            self.console.print(renderable)
            self._printed_at = time.monotonic()


async def snapshots(store: TableLeaseStore, http: aiohttp.ClientSession) -> Snapshot | None:
    """One snapshot, or None when the table did not answer this time."""
    try:
        return await take_snapshot(store, http)
    except LeaseError:
        return None
