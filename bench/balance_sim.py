"""The pure balancer at scale: 1,000 hosts and 10,000 leases in one lease partition, no I/O.

    python -m bench.balance_sim [--hosts 1000] [--leases 10000] [--seed 1]
                                [--acquire-interval 10] [--expiry 30] [--check] [--plain]

Simulates the lease table as `plan_takes` (leases/policy/balancing.py, unchanged) drives it. A round
is one balancing tick of every live host, in random order; each plan is applied at once, so later
hosts of the round see it (the store's ETag checks would make the same plan fail on a stale row).
Between rounds, owners honour hand-over requests by releasing (owner cleared, next_owner kept) and
the taker acquires the lease in its next tick. Expiry is judged in rounds (expiry / acquire
interval, 3 by default): a lease owned by a dead host looks expired at once (we count from the
moment survivors see it expired, one expiry after the crash); a free lease reserved for a host that
does not take it looks expired after that many rounds. Live owners renew; renewals are not simulated
one by one, only counted in the operations estimate.

Scenarios: from an empty table; 10 % of the hosts die; 10 % new hosts join the balanced table. Then
what a processor at rest costs the lease table's partition, before quiet ticks (every host listing
every lease each tick) and now (`leases/policy/watching.py`), at 100, 1,000 and 10,000 hosts; and
`--balance-by load` on shard rates skewed by a Zipf law (`bench/load_sim.py`).

Speed: `plan_takes` is linear in the leases (~17 ms a call over 10,000 plain views here) and
about 9,000 ticks in a run produce a plan. The balancer is left as it is; the loop around it
is what is optimised (a run took ~180 s before, ~55 s now, ~110 s with `--plain`):
- the views are kept built, and only the one a write changes is replaced (`Table`);
- a host whose plan is certainly empty by the balancer's own rules is not asked (`may_act`;
  `--check` asks anyway and asserts that the plan is empty, and non-empty when asked);
- views store their derived properties (`View`), the rng shuffles with numpy (`Rng`), and the
  cyclic garbage collector is off; `--plain` uses `LeaseView` and `random.Random` instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import random
import time
from collections import Counter
from collections.abc import Iterable, MutableSequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np  # a dependency of pandas

from bench import load_sim
from leases.policy.balancing import BalanceLimits, TakePlan, plan_takes
from leases.policy.expiry_tracker import LeaseView
from leases.policy.watching import WATCHERS, full_listing_every
from leases.record import HostId, Lease, LeaseToken
from leases.store.table_settings import DEFAULT_LEASE_PARTITIONS as LEASE_PARTITIONS
from processor.host.health.presence import FORGET_EVERY

ROOT = Path(__file__).resolve().parent.parent
# Azure Storage scalability targets for Table storage: "target throughput for a single table
# partition (1 KiB entities): up to 2,000 entities per second".
PARTITION_ENTITIES_PER_S = 2_000
PAGE_SIZE = 1_000  # a table query returns at most 1,000 entities per page
MAX_ROUNDS = 500


class View(LeaseView):
    """A `LeaseView` with its derived properties stored rather than computed per access:
    `plan_takes` reads `owner` about nine times per lease per call, a third of its time over
    10,000 views. Same values as `LeaseView`'s properties (`check_views` verifies each run)."""

    __slots__ = ("is_live", "owner", "token")

    def __init__(self, lease: Lease, is_expired: bool = False) -> None:
        put = object.__setattr__  # LeaseView is frozen
        put(self, "lease", lease)
        put(self, "is_expired", is_expired)
        put(self, "owner", lease.owner)
        put(self, "token", lease.token)
        put(self, "is_live", lease.owner is not None and not is_expired)


class Rng(random.Random):
    """A `random.Random` whose `shuffle` is one numpy permutation seeded from this generator:
    as uniform as the stdlib's element-by-element shuffle, four times faster on the
    10,000-lease lists `plan_takes` shuffles (once or twice a call, a third of its time)."""

    def shuffle(self, x: MutableSequence[Any]) -> None:
        order = np.random.default_rng(self.getrandbits(64)).permutation(len(x))
        x[:] = [x[i] for i in order.tolist()]


def check_views(views: Iterable[LeaseView]) -> None:
    for v in views:
        base = (LeaseView.owner.fget(v), LeaseView.token.fget(v), LeaseView.is_live.fget(v))  # type: ignore[attr-defined]
        assert (v.owner, v.token, v.is_live) == base, f"{v}: View disagrees with LeaseView"


@dataclass
class RoundMoves:
    acquired: int = 0
    requested: int = 0

    @property
    def moves(self) -> int:
        return self.acquired + self.requested


@dataclass
class Table:
    """The lease table, its views as every host sees them, and the aggregates `may_act` needs,
    all kept up to date on every write."""

    expiry_rounds: int
    view: type[LeaseView] = View
    leases: dict[LeaseToken, Lease] = field(default_factory=dict)
    views: dict[LeaseToken, LeaseView] = field(default_factory=dict)
    changed: dict[LeaseToken, int] = field(default_factory=dict)  # round of the last write
    load: Counter[HostId] = field(default_factory=Counter)  # live owner -> leases owned
    incoming: Counter[HostId] = field(default_factory=Counter)  # taker -> live leases asked for
    free: set[LeaseToken] = field(default_factory=set)
    abandoned: set[LeaseToken] = field(default_factory=set)  # owned by a dead host
    requested: set[LeaseToken] = field(default_factory=set)  # owned, hand-over asked
    asked_of: Counter[HostId] = field(default_factory=Counter)  # owner -> of those, its own
    dead: set[HostId] = field(default_factory=set)
    now: int = 0

    @classmethod
    def empty(cls, n: int, expiry_rounds: int, view: type[LeaseView]) -> Table:
        t = cls(expiry_rounds, view)
        width = len(str(n - 1))
        for i in range(n):
            lease = Lease(LeaseToken(f"{i:0{width}d}"))
            t.leases[lease.token] = lease
            t.changed[lease.token] = 0
            t.views[lease.token] = t.view(lease)
            t._account(lease, +1)
        return t

    def is_expired(self, lease: Lease) -> bool:
        if lease.owner is None:
            return self.now - self.changed[lease.token] >= self.expiry_rounds
        return lease.owner in self.dead  # live owners renew

    def _account(self, lease: Lease, sign: int) -> None:
        t, owner, asked = lease.token, lease.owner, lease.next_owner
        if owner is None:
            (self.free.add if sign > 0 else self.free.discard)(t)
        elif owner in self.dead:
            (self.abandoned.add if sign > 0 else self.abandoned.discard)(t)
        else:
            self.load[owner] += sign
            if not self.load[owner]:
                del self.load[owner]
            if asked is not None and asked != owner:
                self.incoming[asked] += sign
                self.asked_of[owner] += sign
                (self.requested.add if sign > 0 else self.requested.discard)(t)

    def write(self, seen: Lease, **changes: object) -> None:
        assert self.leases[seen.token] is seen, f"{seen.token}: a plan on a stale snapshot"
        new = dataclasses.replace(seen, version=seen.version + 1, **changes)  # type: ignore[arg-type]
        self._account(seen, -1)
        self.leases[new.token] = new
        self.changed[new.token] = self.now
        self._account(new, +1)
        self.views[new.token] = self.view(new, is_expired=self.is_expired(new))

    def kill(self, hosts: Iterable[HostId]) -> None:
        gone = set(hosts)
        owned = [x for x in self.leases.values() if x.owner in gone]
        for x in owned:
            self._account(x, -1)
        self.dead |= gone
        for x in owned:
            self._account(x, +1)
            self.views[x.token] = self.view(x, is_expired=True)
        for h in gone:
            self.incoming.pop(h, None)
            self.asked_of.pop(h, None)

    def may_act(self, me: HostId) -> bool:
        """Whether `plan_takes` returns a non-empty plan for `me`, by its own rules (with no
        orphans and no failed leases, as here). Whether a plan is empty does not depend on
        the rng: only which leases it names does."""

        def bound(h: HostId) -> int:  # owned and not asked for, plus asked for
            return self.load[h] - self.asked_of[h] + self.incoming[h]

        askers = {h for h, n in self.incoming.items() if n > 0}
        hosts = len(set(self.load) | askers | {me})
        target = math.ceil(len(self.leases) / hosts)
        have = bound(me)
        if have >= target:
            return False
        if self.abandoned:
            return True
        for t in self.free:
            x = self.leases[t]
            if x.next_owner == me or self.views[t].is_expired:
                return True
            if x.next_owner is None and not x.error:
                return True
        # a host with a lease nobody asked for yet, bound for 2+ more than me
        most = max(
            (bound(h) for h, n in self.load.items() if h != me and n > self.asked_of[h]),
            default=0,
        )
        return most - have >= 2

    def apply(self, me: HostId, plan: TakePlan, moves: RoundMoves) -> None:
        for x in plan.acquire:
            self.write(x, owner=me, epoch=x.epoch + 1, next_owner=None, error="")
        for x in plan.steal:
            self.write(x, next_owner=me)
        moves.acquired += len(plan.acquire)
        moves.requested += len(plan.steal)

    def end_round(self) -> None:
        """Owners release what was asked of them; then time passes and free leases age."""
        for t in sorted(self.requested):
            self.write(self.leases[t], owner=None, error="")
        self.now += 1
        for t in self.free:
            v = self.views[t]
            if v.is_expired != self.is_expired(v.lease):
                self.views[t] = self.view(v.lease, is_expired=not v.is_expired)

    def balanced(self, live: list[HostId]) -> bool:
        if self.free or self.abandoned or self.requested:
            return False
        counts = [self.load[h] for h in live]
        return max(counts) - min(counts) <= 1


@dataclass
class Sim:
    table: Table
    rng: random.Random
    limits: BalanceLimits
    check: bool = False
    calls: int = 0
    skipped: int = 0

    def tick(self, me: HostId, moves: RoundMoves) -> None:
        acts = self.table.may_act(me)
        if not acts:
            self.skipped += 1
            if self.check:
                views = list(self.table.views.values())
                got = plan_takes(views, me=me, limits=self.limits, rng=random.Random(0))
                assert got.is_empty, f"{me}: skipped a non-empty plan {got}"
            return
        self.calls += 1
        views = list(self.table.views.values())
        plan = plan_takes(views, me=me, limits=self.limits, rng=self.rng)
        assert not (self.check and plan.is_empty), f"{me}: called for an empty plan"
        self.table.apply(me, plan, moves)

    def run(self, live: list[HostId]) -> list[RoundMoves]:
        """Rounds until balanced: every lease owned by a live host, counts within one."""
        rounds: list[RoundMoves] = []
        while not self.table.balanced(live):
            if len(rounds) == MAX_ROUNDS:
                raise SystemExit(f"not balanced after {MAX_ROUNDS} rounds")
            moves = RoundMoves()
            order = list(live)
            self.rng.shuffle(order)
            for me in order:
                self.tick(me, moves)
            self.table.end_round()
            rounds.append(moves)
        check_views(self.table.views.values())
        return rounds


def fewest_moves(table: Table, live: list[HostId]) -> int:
    """A lower bound on the moves to balance: every free or abandoned lease acquired once, and
    every lease a host holds beyond ceil(leases / hosts) handed over (a request + an acquire)."""
    top = math.ceil(len(table.leases) / len(live))
    excess = sum(max(0, table.load[h] - top) for h in live)
    return len(table.free) + len(table.abandoned) + 2 * excess


def report(
    title: str, rounds: list[RoundMoves], fewest: int, table: Table, live: list[HostId]
) -> None:
    acquired = sum(m.acquired for m in rounds)
    requested = sum(m.requested for m in rounds)
    counts = Counter(table.load[h] for h in live)
    print(f"\n{title}: balanced after {len(rounds)} rounds")
    print(
        "  moves per round (acquired+requested):",
        ", ".join(f"{m.acquired}+{m.requested}" for m in rounds),
    )
    print(
        f"  moves: {acquired + requested:,} ({acquired:,} acquisitions, {requested:,} hand-over "
        f"requests); fewest possible {fewest:,}"
    )
    print("  now:", ", ".join(f"{n} hosts x {k}" for k, n in sorted(counts.items(), reverse=True)))


@dataclass(frozen=True)
class AtRest:
    """What a balanced processor at rest costs its lease table partition, per second: `hosts`
    hosts, `leases` leases, ticks every `acquire_s`, renewals every `renew_s`. Checkpoints come
    on top (one per delivered batch; none at rest)."""

    hosts: int
    leases: int
    acquire_s: float
    renew_s: float

    def list_reads(self, *, quiet: bool) -> float:
        """Entities listed: every host lists every lease each tick (before); each lease is
        listed by WATCHERS hosts each tick, plus the safety net's full listings (quiet)."""
        h, n, a = self.hosts, self.leases, self.acquire_s
        if not quiet or h <= WATCHERS:
            return h * n / a
        return WATCHERS * n / a + n * h / (a * full_listing_every(h))

    def host_row_reads(self, *, quiet: bool) -> float:
        """Each host lists the host rows now and then to forget silent hosts: every 30 of its
        publishes (before), or every max(30, hosts) (quiet)."""
        every = max(FORGET_EVERY, self.hosts) if quiet else FORGET_EVERY
        return self.hosts * self.hosts / (every * self.acquire_s)

    def base(self, *, quiet: bool) -> float:
        """The processor's own partition: the processor row read once a tick by every host,
        host rows written once a tick, and listed now and then."""
        return 2 * self.hosts / self.acquire_s + self.host_row_reads(quiet=quiet)

    def leases_part(self, *, quiet: bool) -> float:
        """The leases' rows: listings and renewals."""
        return self.list_reads(quiet=quiet) + self.leases / self.renew_s

    def entities(self, *, quiet: bool) -> float:
        return self.base(quiet=quiet) + self.leases_part(quiet=quiet)

    def busiest(self, partitions: int) -> float:
        """Entities/s of the busiest partition, quiet ticks and leases spread over
        `partitions` partitions beside the processor's own."""
        return max(self.base(quiet=True), self.leases_part(quiet=True) / partitions)

    def requests(self, *, quiet: bool, partitions: int = 1) -> float:
        """Requests per second (a listing is one query per partition, one request per
        1,000-row page)."""
        h, n, a = self.hosts, self.leases, self.acquire_s
        rows = min(n, WATCHERS * math.ceil(n / h)) if quiet and h > WATCHERS else n
        lists = h * partitions * math.ceil(rows / partitions / PAGE_SIZE) / a
        return lists + 2 * h / a + n / self.renew_s  # + processor row + host row, + renewals


def operations(hosts: int, leases: int, acquire_s: float, expiry_s: float) -> None:
    renew_s = expiry_s / 3
    per_host = leases / hosts
    print(
        f"\nthe lease table at rest, {per_host:g} leases per host; ticks every "
        f"{acquire_s:g} s, renewals every {renew_s:g} s (expiry {expiry_s:g} s); entities/s "
        f"(requests/hour) against Azure Table's ~{PARTITION_ENTITIES_PER_S:,} entities/s per "
        "partition:"
    )
    heads = [
        "  hosts x leases",
        "all listed, 1 partition (before)",
        "quiet ticks, 1 partition",
        f"quiet, {LEASE_PARTITIONS} lease partitions (now)",
        "renewals",
    ]
    print("  " + " | ".join(heads))
    for h in (100, 1_000, 10_000):
        c = AtRest(h, round(h * per_host), acquire_s, renew_s)
        cells = [
            f"{h:,} x {c.leases:,}",
            f"{c.entities(quiet=False):,.0f} ({c.requests(quiet=False) * 3600:,.0f})",
            f"{c.entities(quiet=True):,.0f} ({c.requests(quiet=True) * 3600:,.0f})",
            f"{c.busiest(LEASE_PARTITIONS):,.0f} busiest "
            f"({c.requests(quiet=True, partitions=LEASE_PARTITIONS) * 3600:,.0f})",
            f"{c.leases / renew_s:,.0f}",
        ]
        print("  " + " | ".join(c.rjust(len(head)) for c, head in zip(cells, heads, strict=True)))
    crash = WATCHERS * per_host * (leases + hosts)
    print(
        f"  crash detection: expiry + one tick ({expiry_s + acquire_s:g} s) either way: every "
        f"lease is listed by {WATCHERS} hosts each tick; a crash then costs one full listing by "
        f"each host that takes a lease, about {crash:,.0f} entities at {hosts:,} x {leases:,} "
        "(the watchers of its leases), once"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--acquire-interval", type=float, default=10.0, help="seconds (default 10)")
    ap.add_argument("--expiry", type=float, default=30.0, help="lease expiry, seconds (default 30)")
    ap.add_argument("--check", action="store_true", help="verify every skipped plan (slow)")
    ap.add_argument("--plain", action="store_true", help="stdlib LeaseView and random.Random")
    ap.add_argument("--load-hosts", type=int, default=100, help="--balance-by load scenario")
    ap.add_argument("--load-leases", type=int, default=1000, help="--balance-by load scenario")
    ap.add_argument("--zipf", type=float, default=1.0, help="shard rates ~ 1/k^s (default 1)")
    ap.add_argument("--noise", type=float, default=0.1, help="rate noise, +/- (default 0.1)")
    args = ap.parse_args()
    started = time.perf_counter()
    # The simulation makes no reference cycles: reference counting frees everything, and the
    # cyclic collector, triggered by plan_takes' many short-lived tuples, only costs time (30 %).
    gc.disable()
    expiry_rounds = max(1, math.ceil(args.expiry / args.acquire_interval))
    rng = random.Random(args.seed) if args.plain else Rng(args.seed)
    limits = BalanceLimits()
    table = Table.empty(args.leases, expiry_rounds, LeaseView if args.plain else View)
    sim = Sim(table, rng, limits, check=args.check)
    width = len(str(args.hosts + args.hosts // 10))
    hosts = [HostId(f"h{i:0{width}d}") for i in range(args.hosts)]
    print(
        f"balance_sim: {args.hosts:,} hosts, {args.leases:,} leases, seed {args.seed}; "
        f"max_acquire {limits.max_acquire}, max_steal {limits.max_steal}; a round = one tick of "
        f"every live host; expiry = {expiry_rounds} rounds"
    )

    fewest = fewest_moves(table, hosts)
    report("from an empty table", sim.run(hosts), fewest, table, hosts)

    dead = set(rng.sample(hosts, args.hosts // 10))
    survivors = [h for h in hosts if h not in dead]
    lost = sum(1 for x in table.leases.values() if x.owner in dead)
    table.kill(dead)
    fewest = fewest_moves(table, survivors)
    title = f"{len(dead)} hosts die, their {lost:,} leases expired as survivors see them"
    report(title, sim.run(survivors), fewest, table, survivors)

    joined = [HostId(f"h{i:0{width}d}") for i in range(args.hosts, args.hosts + args.hosts // 10)]
    live = survivors + joined
    fewest = fewest_moves(table, live)
    title = f"{len(joined)} new hosts join the {len(survivors)} balanced ones"
    report(title, sim.run(live), fewest, table, live)
    print(
        f"\n(plan_takes called {sim.calls:,} times; {sim.skipped:,} ticks skipped as certainly "
        f"empty{', each checked' if args.check else ''}; {time.perf_counter() - started:.0f} s)"
    )
    gc.enable()

    operations(args.hosts, args.leases, args.acquire_interval, args.expiry)
    load_sim.report(
        args.load_hosts, args.load_leases, s=args.zipf, seed=args.seed, noise=args.noise
    )


if __name__ == "__main__":
    main()
