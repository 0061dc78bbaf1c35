"""Quiet ticks: what a settled host lists of the lease table, and what it makes of the rest.

Listing every lease at every tick costs the table hosts x leases entities per interval: a
thousand hosts of ten leases each read ten million entities every ten seconds, 500 times what one
Azure Table partition serves. Yet a balanced, healthy processor changes little. So a host lists
everything only when something is going on (its first tick, a plan it just carried out, a
hand-over it waits for, a write that lost a race, something free, expired or asked of it in what
it sees, and at a slow safety-net pace); otherwise it lists only the slices of the table it
*watches*, and keeps the rest as it last saw it.

Watching: the sorted tokens are cut into as many slices as there are hosts, and the host of rank
k (among the hosts it knows, sorted) watches slices k .. k + WATCHERS - 1. Every lease is watched
by `WATCHERS` hosts, so a crashed host's leases are seen expiring, on the watchers' own clocks,
within expiry + one tick as before; each watcher sees them go and takes them (the count target
rises as the dead host drops out). The slices tile the whole key space, so a lease created
since the last full listing is watched too. Hosts that disagree on the host list for a moment
watch some slices three times and some once; the safety-net listing bounds any gap.

What is not listed is presumed live (its owner renewing it unseen), except the leases of an owner
seen to have let one lease expire: those are judged on this host's clock since it last saw them,
and an acquisition planned on such a row is conditional on the row being exactly as seen, so it
succeeds only if nobody wrote the row since: if that was at least an expiry ago, it had expired.

A watcher takes an expired lease it sees even beyond its count target (`expired_to_take`): only
its watchers see it go, and a lease must not wait for the safety net. The imbalance that leaves,
and leases left free, are made known through the balance note on the processor row, which every
host reads at every tick anyway: any host whose full listing disagrees with the note rewrites it,
and a settled host that could act on it (holding two less than the most loaded host, or under the
target while leases are unowned) lists everything (`needs_full_listing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from leases.policy.balancing import share
from leases.policy.expiry_tracker import ExpiryTracker, LeaseView
from leases.record import HostId, Lease, LeaseToken
from leases.reserved_rows import RESERVED_ROWS_FROM, BalanceNote

WATCHERS = 2  # hosts that watch each lease at a quiet tick
FULL_EVERY_TICKS = 60  # a settled host still lists everything this often, at least...
FULL_EVERY_TICKS_PER_HOST = 10  # ...or every hosts x this many ticks, if longer

KeyRange = tuple[str, str]  # RowKey from (inclusive) to (exclusive)
EVERYTHING: KeyRange = ("", RESERVED_ROWS_FROM)


def watch_ranges(
    tokens: Iterable[str], hosts: Iterable[HostId], me: HostId, *, watchers: int = WATCHERS
) -> list[KeyRange]:
    """The key ranges `me` lists at a quiet tick, adjacent slices merged (one or two ranges);
    `[EVERYTHING]` when there are no more hosts than watchers per lease."""
    ranked = sorted({*hosts, me})
    n = len(ranked)
    if watchers >= n:
        return [EVERYTHING]
    ordered = sorted(set(tokens))

    def cut(j: int) -> str:
        """Where slice j starts: the first token of its share, or the ends of the key space."""
        at = j * len(ordered) // n
        return "" if j == 0 else RESERVED_ROWS_FROM if at >= len(ordered) else ordered[at]

    k = ranked.index(me)
    first = [(k + i) % n for i in range(watchers)]
    ranges: list[KeyRange] = []
    for j in sorted(first):
        lo, hi = cut(j), RESERVED_ROWS_FROM if j == n - 1 else cut(j + 1)
        if ranges and ranges[-1][1] == lo:
            ranges[-1] = (ranges[-1][0], hi)
        else:
            ranges.append((lo, hi))
    return [(lo, hi) for lo, hi in ranges if lo < hi]


def in_ranges(token: str, ranges: Sequence[KeyRange]) -> bool:
    return any(lo <= token < hi for lo, hi in ranges)


def full_listing_every(hosts: int) -> int:
    """Ticks between a settled host's safety-net full listings: across the processor about one
    full listing per `FULL_EVERY_TICKS_PER_HOST` ticks, whatever the number of hosts."""
    return max(FULL_EVERY_TICKS, FULL_EVERY_TICKS_PER_HOST * hosts)


def ranges_to_list(
    view: TableView,
    me: HostId,
    *,
    settled: bool,
    ticks_since_full: int | None,
    note: BalanceNote | None = None,
    mine: int = 0,
    watched: list[KeyRange] | None = None,
) -> list[KeyRange]:
    """What a host holding `mine` leases lists at this tick: everything unless its last tick
    found nothing to do (`settled`), its last full listing is recent enough and the processor
    row's `note` gives it nothing to do; else the slices it watches (`watched`, when the caller
    has them already)."""
    hosts = view.hosts()
    if not settled or ticks_since_full is None or needs_full_listing(note, mine):
        return [EVERYTHING]
    if ticks_since_full >= full_listing_every(len(hosts | {me})):
        return [EVERYTHING]
    return watched if watched is not None else watch_ranges(view.rows, hosts, me)


def needs_full_listing(note: BalanceNote | None, mine: int) -> bool:
    """Whether a host holding `mine` leases could act on `note`: take an unowned lease, or ask
    the most loaded host for one."""
    if note is None:
        return False
    return mine + 2 <= note.most or (note.unowned > 0 and mine < note.target)


def balance_note(views: Sequence[LeaseView], me: HostId) -> BalanceNote:
    """The note of a full listing's views (finished leases left out), counted as `plan_takes`
    counts: live hosts are the owners and askers of live leases, and `me`."""
    active = [v for v in views if not v.lease.parked]
    live = [v for v in active if v.is_live]
    held, _, target = share(live, len(active), me=me)
    return BalanceNote(
        target=target,
        most=max(held.values(), default=0),
        unowned=sum(1 for v in active if not v.is_live),
    )


def expired_to_take(fresh: Sequence[LeaseView], planned: Iterable[Lease]) -> list[Lease]:
    """The expired leases among those just listed that the plan does not take already: a
    watcher takes them whatever its target (they are not parked, and were owned: free ones are
    for the hosts under target, which the balance note sends to look)."""
    taken = {x.token for x in planned}
    return [
        v.lease
        for v in fresh
        if v.is_expired and v.owner is not None and not v.lease.parked and v.token not in taken
    ]


def is_settled(views: Iterable[LeaseView], *, me: HostId, held: set[LeaseToken]) -> bool:
    """Whether the freshly listed leases show nothing to act on: none free or expired (parked
    ones aside), none asked of or for this host, none of ours that this host does not run."""
    for v in views:
        x = v.lease
        if x.parked:
            continue
        if x.owner is None or v.is_expired or x.next_owner is not None:
            return False
        if x.owner == me and x.token not in held:
            return False
    return True


@dataclass
class TableView:
    """What one host knows of its processor's leases between full listings: the rows as last
    listed, and when it first saw each as it is (its expiry clock)."""

    tracker: ExpiryTracker
    rows: dict[LeaseToken, Lease]

    @classmethod
    def empty(cls, expiry_s: float) -> TableView:
        return cls(ExpiryTracker(expiry_s), {})

    def listed(
        self, fresh: Sequence[Lease], now: float, ranges: Sequence[KeyRange]
    ) -> tuple[list[LeaseView], list[LeaseView]]:
        """Take in a listing of `ranges` made at monotonic time `now` (`[EVERYTHING]`: a full
        listing). Returns the views of the fresh rows, and of every lease known."""
        listed = {x.token for x in fresh}
        gone = [t for t in self.rows if in_ranges(t, ranges) and t not in listed]  # deleted
        for t in gone:
            del self.rows[t]
        self.tracker.forget(gone)
        fresh_views = self.tracker.observe(fresh, now, keep_others=True)
        leaving = _leaving(fresh, self.rows)
        self.rows.update((x.token, x) for x in fresh)
        suspects = {v.owner for v in fresh_views if v.owner is not None and v.is_expired}
        views = list(fresh_views)
        for t in sorted(self.rows.keys() - listed):
            x = self.rows[t]
            # presumed live unless its owner let a lease we can see expire, or is leaving
            expired = x.owner in leaving or (
                x.owner in suspects and self.tracker.unchanged_for(t, now)
            )
            views.append(LeaseView(x, is_expired=expired))
        return fresh_views, views

    def hosts(self) -> set[HostId]:
        """The hosts the known rows show as owners or askers."""
        return {h for x in self.rows.values() for h in (x.owner, x.next_owner) if h is not None}


def _leaving(fresh: Iterable[Lease], before: dict[LeaseToken, Lease]) -> set[HostId]:
    """Hosts seen letting a lease go for nobody in particular and with no error: stopping (a
    SIGTERM releases every lease). Their other rows, not listed, count as no longer theirs; an
    acquisition planned on such a row lands only if it is still exactly as seen."""
    out: set[HostId] = set()
    for x in fresh:
        was = before.get(x.token)
        owner = None if was is None else was.owner
        plain = x.owner is None and x.next_owner is None and not x.error and not x.parked
        if owner is not None and plain:
            out.add(owner)
    return out
