"""The invariants a chaos run checks, as pure functions of what it recorded."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from leases import Lease
from processor.changefeed.errors import InvalidContinuation
from processor.reading.lease_position import LeasePosition


@dataclass(frozen=True, slots=True)
class Delivery:
    """One batch handed to an observer, from a host's `batch.delivering` log line. `mono` is
    the host's CLOCK_MONOTONIC when it last checked that the lease was its own (shared by all
    processes of the machine, unlike the skewed wall clocks)."""

    mono: float
    host: str
    lease: str
    epoch: int
    events: int
    first: str = ""  # the batch's lowest and highest positions ("": not logged)
    last: str = ""


@dataclass(frozen=True, slots=True)
class Redelivery:
    """Events of a lease delivered again by a newer (host, epoch) than the one that first
    delivered them: what a lease's move cost the observers. `mono` is the first such batch."""

    mono: float
    lease: str
    before: str  # "h2@4": who had delivered them
    after: str
    events: int


def backward_moves(samples: Iterable[tuple[float, Lease]]) -> list[str]:
    """Leases whose continuation, sampled in time order, ever moved backwards."""
    last: dict[str, LeasePosition] = {}
    problems = []
    for t, lease in samples:
        try:
            pos = LeasePosition.from_json(lease.continuation, lease=lease.token)
        except InvalidContinuation as e:
            problems.append(f"t={t:.2f} {e}")
            continue
        before = last.get(lease.token)
        if before is not None and pos.is_before(before):
            problems.append(
                f"t={t:.2f} lease {lease.token} moved back from {before.to_json()} to "
                f"{pos.to_json()} (owner {lease.owner}, epoch {lease.epoch})"
            )
        else:
            last[lease.token] = pos
    return problems


def late_deliveries(deliveries: Iterable[Delivery]) -> list[str]:
    """Batches of a lease delivered after a newer epoch of it had started delivering."""
    newest: dict[str, Delivery] = {}
    problems = []
    for d in sorted(deliveries, key=lambda d: d.mono):
        seen = newest.get(d.lease)
        if seen is not None and d.epoch < seen.epoch:
            problems.append(
                f"lease {d.lease}: {d.host} delivered at epoch {d.epoch} (t={d.mono:.3f}) after "
                f"{seen.host} had started at epoch {seen.epoch} (t={seen.mono:.3f})"
            )
        elif seen is None or d.epoch > seen.epoch:
            newest[d.lease] = d
    return problems


def redeliveries(deliveries: Iterable[Delivery]) -> list[Redelivery]:
    """Per lease move, the events delivered again: batches wholly at or below the highest
    position an earlier (host, epoch) of the lease delivered (a batch across it is left out,
    so these are at least the moves' costs), largest first."""
    top: dict[str, tuple[str, str]] = {}  # lease -> highest last position, and by whom
    moves: dict[tuple[str, str, str], Redelivery] = {}
    for d in sorted(deliveries, key=lambda d: d.mono):
        if not d.last:
            continue
        who = f"{d.host}@{d.epoch}"
        high, by = top.get(d.lease, ("", who))
        if by != who and d.last <= high:
            key = (d.lease, by, who)
            was = moves.get(key)
            events = d.events + (was.events if was else 0)
            moves[key] = Redelivery(was.mono if was else d.mono, d.lease, by, who, events)
        if d.last > high:
            top[d.lease] = (d.last, who)
    return sorted(moves.values(), key=lambda m: -m.events)


def exactly_once(feed_ids: set[str], change_log: Counter[str]) -> list[str]:
    """The change log against the feed: every id once, nothing else."""
    missing = feed_ids - set(change_log)
    twice = sorted(i for i, n in change_log.items() if n > 1)
    extra = set(change_log) - feed_ids
    problems = []
    if missing:
        problems.append(f"{len(missing)} events missing from changes, e.g. {sorted(missing)[:3]}")
    if twice:
        problems.append(f"{len(twice)} events more than once in changes, e.g. {twice[:3]}")
    if extra:
        problems.append(
            f"{len(extra)} ids in changes that the feed lacks, e.g. {sorted(extra)[:3]}"
        )
    return problems


def rest_problems(leases: list[Lease], hosts: set[str]) -> list[str]:
    """At rest: every lease owned by a live host, and loads within one of each other."""
    problems = [f"lease {x.token} has no owner" for x in leases if x.owner is None]
    problems += [f"lease {x.token} is parked: {x.error}" for x in leases if x.parked]
    load = Counter(x.owner for x in leases if x.owner is not None)
    strangers = set(load) - hosts
    if strangers:
        problems.append(f"leases owned by hosts not running: {sorted(strangers)}")
    counts = [load.get(h, 0) for h in hosts]
    if counts and max(counts) - min(counts) > 1:
        problems.append(f"unbalanced at rest: {dict(sorted(load.items()))}")
    return problems


def job_stalls(
    samples: Iterable[tuple[float, Lease]], *, since: float, until: float, limit_s: float
) -> list[str]:
    """A singleton job stuck after the faults ended (`since`): its row, sampled in time order,
    went unwritten (no renewal, no checkpoint, by any holder) for more than `limit_s` before
    `until` (when the hosts were told to stop), or its continuation never moved again, the
    holder's last run as it stopped included (held, but never ran to a checkpoint)."""
    rows = sorted(samples, key=lambda s: s[0])
    start = next((row for t, row in reversed(rows) if t < since), None)
    writes: list[tuple[float, Lease]] = []  # each change of the row after `since`
    etag = start.etag if start else None
    for t, row in rows:
        if t >= since and row.etag != etag:
            writes.append((t, row))
            etag = row.etag
    edges = [since, *(t for t, _ in writes if t <= until), until]
    problems = [
        f"job: its row unwritten from t={a:.1f} to t={b:.1f} (limit {limit_s:g}s)"
        for a, b in itertools.pairwise(edges)
        if b - a > limit_s
    ]
    if not any(start is None or row.continuation != start.continuation for _, row in writes):
        problems.append(
            f"job: its continuation did not move after the faults ended (t={since:.1f})"
        )
    return problems


def sequencer_regressions(changes: Iterable[tuple[int, str, str, str]]) -> list[str]:
    """Blobs whose state row was ever written with an older sequencer than before, from the
    state table's changes as (commit version, container, blob, sequencer). Sequencers of
    different lengths cannot be compared (the feed then wins, whatever they say): each is held
    against the newest of its own length."""
    newest: dict[tuple[str, str, int], tuple[int, str]] = {}
    problems = []
    for version, container, blob, seq in sorted(changes):
        key = (container, blob, len(seq))
        before = newest.get(key)
        if before is not None and seq < before[1]:
            problems.append(
                f"state row {container}/{blob} moved back from sequencer {before[1]} (version "
                f"{before[0]}) to {seq} (version {version})"
            )
        else:
            newest[key] = (version, seq)
    return problems
