"""`cfp status`: every lease of a processor, its owner and position, and what is left to read;
its hosts, and its singleton jobs (who holds each, its last run).

What is left is estimated from blob sizes: the unread bytes of the lease's current chunk, its
later chunks, and its shard's chunks in later consumable segments. It is read-only and makes
one listing per lease and segment still ahead of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from leases import HostReport, Lease, LeaseStore, ProcessorState, job_name
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.change_filter import FilterError
from processor.changefeed.errors import FeedCorrupt, InvalidContinuation
from processor.reading.backlog import bytes_left
from processor.reading.lag import events_left, time_lag_s
from processor.reading.lease_position import LeasePosition
from processor.reading.processor_identity import ProcessorIdentity

LISTING_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    """A lease row as stored, its parsed position (None: not one we can read) and an estimate
    of what is left to read (None: unknown)."""

    lease: Lease
    position: LeasePosition | None
    bytes_left: int | None

    def events_left(self) -> int | None:
        """Bytes left over the lease's bytes per event so far (None: nothing to go by)."""
        x = self.lease
        return events_left(self.bytes_left, events=x.events, event_bytes=x.event_bytes)

    def lag_seconds(self, now: datetime) -> float | None:
        """The time lag of the last checkpointed event."""
        return time_lag_s(self.lease.last_event_time, caught_up=self.lease.caught_up, now=now)

    def to_json(self, now: datetime | None = None) -> dict[str, object]:
        x, pos = self.lease, self.position
        lag = self.lag_seconds(now or datetime.now(UTC))
        return {
            "lease": x.token,
            "owner": x.owner,
            "epoch": x.epoch,
            "nextOwner": x.next_owner,
            "segment": pos.segment if pos else None,
            "segmentDone": pos.is_segment_done if pos else None,
            "chunk": pos.shard.chunk if pos else None,
            "offset": pos.shard.block_offset if pos else None,
            "index": pos.shard.event_index if pos else None,
            "lastCheckpoint": x.checkpoint_time.isoformat() if x.checkpoint_time else None,
            "caughtUp": x.caught_up,
            "error": x.error or None,
            "parked": x.parked,
            "bytesLeft": self.bytes_left,
            "eventsLeft": self.events_left(),
            "lastEventTime": x.last_event_time.isoformat() if x.last_event_time else None,
            "lagSeconds": None if lag is None else round(lag, 1),
            "events": x.events,
            "continuation": x.continuation,
            "deadLetters": x.dead_letters,
            "moves": [m.to_json() for m in x.moves],
            "gaps": [g.to_json() for g in x.gaps],
        }


@dataclass(frozen=True, slots=True)
class StatusReport:
    leases: list[LeaseStatus]
    feed_error: str | None  # the feed's segment list could not be read: nothing is estimated
    hosts: list[HostReport]
    processor: ProcessorState
    jobs: list[Lease] = field(default_factory=list)  # singleton jobs' leases (Spark's state job)
    identity: str | None = None  # what the processor delivers (its filter, its end time)

    def owned(self) -> Counter[str]:
        """Leases per owner, as the lease table says (not as a host last reported: a host
        killed with kill -9 owns its leases only until others take them)."""
        return Counter(r.lease.owner for r in self.leases if r.lease.owner)

    def stuck(self) -> dict[str, str]:
        """Leases their owner reports stuck, with why (only from the owner's own row)."""
        by_host = {h.name: h for h in self.hosts}
        found: dict[str, str] = {}
        for r in self.leases:
            host = by_host.get(r.lease.owner) if r.lease.owner else None
            if host is not None and r.lease.token in host.stuck:
                found[r.lease.token] = host.stuck[r.lease.token]
        return found

    def is_finished(self) -> bool:
        """Every lease read to the processor's end time (or a done scan partition)."""
        return bool(self.leases) and all(
            r.position is not None and r.position.is_finished and r.lease.caught_up
            for r in self.leases
        )


def job_json(lease: Lease, now: datetime) -> dict[str, object]:
    try:
        progress = json.loads(lease.continuation) if lease.continuation else None
    except ValueError:
        progress = lease.continuation
    return {
        "job": job_name(lease.token),
        "holder": lease.owner,
        "epoch": lease.epoch,
        "lastRun": lease.checkpoint_time.isoformat() if lease.checkpoint_time else None,
        "lastRunSecondsAgo": (
            round((now - lease.checkpoint_time).total_seconds(), 1)
            if lease.checkpoint_time
            else None
        ),
        "caughtUp": lease.caught_up,
        "progress": progress,
    }


def columns(lines: list[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns two spaces apart, the first row the header (the last
    column unpadded: it may be long)."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()
        for row in lines
    )


def render_jobs(jobs: list[Lease], now: datetime) -> str:
    """One line per singleton job: who holds it, its last run, and what that run left."""
    lines: list[tuple[str, ...]] = [("JOB", "HOLDER", "LAST RUN", "CAUGHT UP", "PROGRESS")]
    for doc in (job_json(j, now) for j in jobs):
        ago = doc["lastRunSecondsAgo"]
        progress = doc["progress"]
        text = (
            " ".join(f"{k}={v}" for k, v in progress.items())
            if isinstance(progress, dict)
            else str(progress or "-")
        )
        lines.append(
            (
                str(doc["job"]),
                f"{doc['holder']} (epoch {doc['epoch']})" if doc["holder"] else "nobody",
                "never" if ago is None else f"{ago:.0f}s ago",
                "yes" if doc["caughtUp"] else "no",
                text,
            )
        )
    return columns(lines)


def host_json(r: HostReport, now: datetime, owned: int) -> dict[str, object]:
    return {
        "host": r.name,
        "state": r.state,
        "since": r.since.isoformat(),
        "lastSeen": r.seen.isoformat(),
        "silentSeconds": round(r.silent_s(now), 1),
        "silent": r.silent_s(now) > r.expiry_s,
        "leases": owned,
        "leasesReported": r.leases,
        "stuck": r.stuck,
        "note": r.note or None,
        "outage": r.outage or None,
        "freshness": r.freshness or None,
        "error": r.error or None,
        "endpoint": r.endpoint or None,
    }


def render_hosts(hosts: list[HostReport], now: datetime, owned: Counter[str]) -> str:
    """One line per host row: its state as it last reported it, how long ago that was, and
    the leases the lease table says it owns."""
    lines: list[tuple[str, ...]] = [
        ("HOST", "STATE", "LEASES", "LAST SEEN", "EVENT AGE p50/p99", "ENDPOINT")
    ]
    for r in sorted(hosts, key=lambda r: r.name):
        silent = r.silent_s(now)
        state = r.state + (f": {r.error}" if r.error else "")
        if r.note and not r.error:
            state += f" ({r.note})"
        if r.outage:
            state += f"; {r.outage}"
        if silent > r.expiry_s and r.state not in ("failed permanently", "stopped"):
            state = f"silent (last said {state})"
        leases = str(owned[r.name])
        seen = f"{silent:.0f}s ago"
        lines.append((r.name, state, leases, seen, freshness_text(r.freshness), r.endpoint or "-"))
    return columns(lines)


def freshness_text(freshness: dict[str, float]) -> str:
    """A host's event ages as `feed 38s/68s hint 0.6s/3.4s` ("-": it has delivered nothing
    fresh yet, or is of a cfp that does not say)."""

    def age(s: float) -> str:
        return f"{s:.1f}s" if s < 10 else _seconds(s)

    parts = [
        f"{source} {age(freshness[f'{source} p50'])}/{age(freshness[f'{source} p99'])}"
        for source in ("feed", "hint")
        if f"{source} p50" in freshness and f"{source} p99" in freshness
    ]
    return " ".join(parts) or "-"


async def processor_status(store: LeaseStore, catalog: FeedCatalog) -> StatusReport:
    """Every lease as stored, with what is left to read when the feed lets us estimate it (a
    broken manifest leaves that lease's estimate out, not the whole report)."""
    leases = await store.list_leases()
    hosts = await store.list_hosts()
    state = await store.processor_state()
    jobs = await store.list_jobs()
    identity = await store.identity()
    feed_error: str | None = None
    try:
        segments: list[str] | None = await catalog.segments(max_age_s=0)
    except FeedCorrupt as e:
        segments, feed_error = None, str(e)
    gate = asyncio.Semaphore(LISTING_CONCURRENCY)

    async def one(lease: Lease) -> LeaseStatus:
        pos = parse_position(lease)
        left = None
        if pos is not None and segments is not None:
            async with gate:
                with contextlib.suppress(FeedCorrupt):
                    left = await bytes_left(catalog, lease.token, pos, segments)
        return LeaseStatus(lease, pos, left)

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(one(lease)) for lease in leases]
    return StatusReport([t.result() for t in tasks], feed_error, hosts, state, jobs, identity)


def describe_position(pos: LeasePosition | None) -> tuple[str, str]:
    """(segment, place in it) for people: `2026/01/01/0100`, `00000.avro@48211#3` or `done`."""
    if pos is None:
        return "?", "invalid continuation"
    if pos.scan is not None:
        scan = pos.scan
        if scan.done:
            return "scan", "done"
        if scan.after is None:
            return "scan", "start"
        after = "/".join(scan.after)
        return "scan", f"after {after if len(after) <= 40 else '...' + after[-37:]}"
    if pos.segment is None:
        start = "start" if pos.start_time is None else f"from {pos.start_time:%Y-%m-%dT%H:%M}Z"
        return "-", start
    segment = pos.segment.removeprefix("idx/segments/").removesuffix("/meta.json")
    if pos.is_segment_done:
        return segment, "done"
    if pos.shard.chunk is None:
        return segment, "start"
    chunk = pos.shard.chunk.rsplit("/", 1)[-1]
    return segment, f"{chunk}@{pos.shard.block_offset}#{pos.shard.event_index}"


def parse_position(lease: Lease) -> LeasePosition | None:
    try:
        return LeasePosition.from_json(lease.continuation, lease=lease.token)
    except InvalidContinuation:
        return None


def render_table(
    rows: list[LeaseStatus], now: datetime | None = None, stuck: dict[str, str] | None = None
) -> str:
    """A fixed-width table for terminals."""
    now = now or datetime.now(UTC)
    stuck = stuck or {}
    header = (
        "LEASE", "OWNER", "EPOCH", "SEGMENT", "POSITION", "CHECKPOINTED", "LEFT", "LAG", "STATE",
    )  # fmt: skip
    lines: list[tuple[str, ...]] = [header]
    for r in rows:
        segment, where = describe_position(r.position)
        x = r.lease
        lines.append(
            (
                x.token,
                x.owner or "(free)",
                str(x.epoch),
                segment,
                where,
                x.checkpoint_time.strftime("%Y-%m-%d %H:%M:%S") if x.checkpoint_time else "-",
                _left(r),
                _seconds(r.lag_seconds(now)),
                _state(r, stuck.get(x.token)),
            )
        )
    return columns(lines)


def render_totals(rows: list[LeaseStatus], now: datetime) -> str:
    """One line: what is left over all leases, and the worst time lag."""
    lefts = [r.bytes_left for r in rows]
    events = [r.events_left() for r in rows]
    lags = [lag for r in rows if (lag := r.lag_seconds(now)) is not None]
    known = all(b is not None for b in lefts)
    total = size_text(sum(b for b in lefts if b is not None)) + ("" if known else "+?")
    n = sum(e for e in events if e is not None)
    about = f", about {n:,} events" if any(e is not None for e in events) else ""
    worst = f"; largest time lag {_seconds(max(lags))}" if lags else ""
    return f"left up to lastConsumable: {total}{about}{worst}"


def _left(r: LeaseStatus) -> str:
    n = r.events_left()
    return size_text(r.bytes_left) + ("" if n is None else f" (~{n:,} ev)")


def _seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h"


def _state(r: LeaseStatus, stuck: str | None) -> str:
    x = r.lease
    state = "caught up" if x.caught_up else "reading"
    if x.caught_up and r.position is not None and r.position.is_finished:
        state = "finished"
    if stuck is not None:
        state = f"STUCK: {stuck}"
    if x.error:
        state = ("PARKED: " if x.parked else "error: ") + x.error
    if x.next_owner:
        state += f" (hand-over to {x.next_owner})"
    if x.moves:
        last = x.moves[-1]
        skipped = "?" if last.skipped_bytes is None else size_text(last.skipped_bytes)
        state += f" (moved {len(x.moves)}x, last {last.at:%Y-%m-%d %H:%M} skipping {skipped})"
    if x.gaps:
        state += f" ({len(x.gaps)} retention gap(s), last {x.gaps[-1].at:%Y-%m-%d %H:%M})"
    if x.dead_letters:
        state += f" ({x.dead_letters} dead-lettered)"
    return state


def size_text(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}GiB"


def status_json(
    report: StatusReport, *, processor: str, table: str, now: datetime
) -> dict[str, object]:
    """`cfp status --json`: one document for machines."""
    rows, state = report.leases, report.processor
    owned, stuck = report.owned(), report.stuck()
    leases = [r.to_json(now) | {"stuck": stuck.get(r.lease.token)} for r in rows]
    return {
        "processor": processor,
        "table": table,
        "at": now.isoformat(),
        "identity": _identity(report, processor),
        "finished": report.is_finished(),
        "feedError": report.feed_error,
        "paused": state.paused,
        "pausedSince": state.since.isoformat() if state.paused and state.since else None,
        "pauseReason": state.reason or None,
        "hosts": [host_json(h, now, owned[h.name]) for h in report.hosts],
        "jobs": [job_json(j, now) for j in report.jobs],
        "bytesLeft": sum(r.bytes_left or 0 for r in rows),
        "eventsLeft": sum(r.events_left() or 0 for r in rows),
        "stuck": sorted(stuck),
        "leases": leases,
    }


def _identity(report: StatusReport, processor: str) -> dict[str, object] | None:
    if report.identity is None:
        return None
    try:
        identity = ProcessorIdentity.from_text(report.identity, where=f"processor {processor!r}")
    except FilterError as e:
        return {"error": str(e)}
    return {
        "filter": identity.change.to_json(),
        "endTime": identity.end_time.isoformat() if identity.end_time else None,
        "text": identity.describe(),
    }


def render_status(report: StatusReport, *, processor: str, table: str, now: datetime) -> str:
    """`cfp status`: the pause, the hosts, the jobs, the leases and their totals, as text."""
    rows, state = report.leases, report.processor
    if not rows:
        return f"processor {processor!r} has no leases in table {table!r}"
    parts = []
    identity = _identity(report, processor)
    if identity is not None:
        finished = " FINISHED (every lease reached the end time)" if report.is_finished() else ""
        described = identity.get("text") or identity.get("error")
        parts.append(f"processor {processor!r} delivers {described}{finished}\n")
    if state.paused:
        parts.append(
            f"processor {processor!r} is PAUSED"
            + (f" since {state.since:%Y-%m-%d %H:%M:%S}Z" if state.since else "")
            + (f": {state.reason}" if state.reason else "")
            + " (`cfp resume` to go on)\n"
        )
    if report.hosts:
        parts.append(render_hosts(report.hosts, now, report.owned()) + "\n")
    if report.jobs:
        parts.append(render_jobs(report.jobs, now) + "\n")
    parts += [render_table(rows, now, report.stuck()), render_totals(rows, now)]
    return "\n".join(parts)
