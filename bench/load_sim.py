"""`--balance-by load` on a skewed table, for `bench/balance_sim.py`: how far from an even share
of the read rate the hosts are when balanced by count, and after balancing by load.

Shard rates follow a Zipf law (the k-th busiest shard reads ~1/k^s of the busiest), shuffled over
the leases. The table starts as balancing by count leaves it: every host with the same number of
leases (within one), whatever their rates. Then every host ticks with `plan_takes(...,
by_load=LoadRule())` until no host plans anything; hand-overs complete between rounds, and each
owner writes the lease's measured rate with its renewal: the true rate times noise (+/-10 % by
default), so rounds see rates as noisy as real ones. After that, more noisy rounds count the
moves noise alone causes (flapping). Max/mean is over the host loads as the balancer weighs them.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass

from leases.policy.balancing import BalanceLimits, plan_takes
from leases.policy.expiry_tracker import LeaseView
from leases.policy.load_balancing import LoadRule, fair_share, host_loads, lease_weights
from leases.record import HostId, Lease, LeaseToken

MAX_ROUNDS = 200


@dataclass
class LoadTable:
    rates: dict[LeaseToken, float]  # true read rates, bytes/s
    leases: dict[LeaseToken, Lease]
    hosts: list[HostId]
    rng: random.Random
    rule: LoadRule
    noise: float
    moves: Counter[LeaseToken] = dataclasses.field(default_factory=Counter)

    @classmethod
    def zipf(
        cls, hosts: int, leases: int, *, s: float, seed: int, rule: LoadRule, noise: float
    ) -> LoadTable:
        rng = random.Random(seed)
        width = len(str(leases - 1))
        tokens = [LeaseToken(f"{i:0{width}d}") for i in range(leases)]
        busiest = 10_000_000.0  # 10 MB/s; only ratios matter
        rates = [busiest / (k + 1) ** s for k in range(leases)]
        rng.shuffle(rates)
        names = [HostId(f"h{i:0{len(str(hosts - 1))}d}") for i in range(hosts)]
        order = list(tokens)
        rng.shuffle(order)  # count balancing: even counts, rates left to chance
        owner = {t: names[i % hosts] for i, t in enumerate(order)}
        table = cls(dict(zip(tokens, rates, strict=True)), {}, names, rng, rule, noise)
        table.leases = {
            t: Lease(t, owner=owner[t], epoch=1, load=table.measured(t)) for t in tokens
        }
        return table

    def measured(self, token: LeaseToken) -> float:
        return self.rates[token] * self.rng.uniform(1 - self.noise, 1 + self.noise)

    def round(self) -> int:
        """Every host ticks once in random order; then hand-overs complete and rates are
        written again. Returns the hand-overs asked for."""
        asked = 0
        order = list(self.hosts)
        self.rng.shuffle(order)
        limits = BalanceLimits()
        for me in order:
            views = [LeaseView(x) for x in self.leases.values()]
            plan = plan_takes(views, me=me, limits=limits, rng=self.rng, by_load=self.rule)
            for x in plan.steal:
                self.leases[x.token] = dataclasses.replace(x, next_owner=me)
            asked += len(plan.steal)
        for t, x in self.leases.items():
            to = x.next_owner if x.next_owner not in (None, x.owner) else x.owner
            self.moves[t] += to != x.owner
            self.leases[t] = dataclasses.replace(
                x, owner=to, next_owner=None, load=self.measured(t)
            )
        return asked

    def spread(self) -> Spread:
        weights = lease_weights(Lease(t, load=r) for t, r in self.rates.items())
        views = [LeaseView(x) for x in self.leases.values()]
        loads = dict.fromkeys(self.hosts, 0.0) | host_loads(views, weights)
        mean = sum(loads.values()) / len(loads)
        fair = fair_share(weights.values(), len(self.hosts))
        held: dict[HostId, list[float]] = {}
        for x in self.leases.values():
            if x.owner is not None:
                held.setdefault(x.owner, []).append(weights[x.token])
        shared = [v for h, v in loads.items() if not (len(held.get(h, [])) == 1 and v > fair)]
        return Spread(
            max(loads.values()) / mean,
            min(loads.values()) / mean,
            max(weights.values()) / mean,
            fair / mean,
            max(shared) / fair,
            min(shared) / fair,
        )


@dataclass(frozen=True)
class Spread:
    """Host loads over the mean; over the fair share for hosts not carrying one lease heavier
    than it alone (those cannot be evened out: the lease cannot be split)."""

    top: float
    low: float
    heaviest: float
    fair: float
    shared_top: float
    shared_low: float


def report(hosts: int, leases: int, *, s: float, seed: int, noise: float) -> None:
    rule = LoadRule()
    t = LoadTable.zipf(hosts, leases, s=s, seed=seed, rule=rule, noise=noise)
    print(
        f"\n--balance-by load: {hosts:,} hosts, {leases:,} leases, shard rates Zipf s={s:g}, "
        f"rates measured +/-{noise:.0%}, tolerance {rule.tolerance:g}"
    )
    was = t.spread()
    print(
        f"  by count (even counts): max/mean host load {was.top:.2f}x, min/mean {was.low:.2f}x; "
        f"hosts without a lease heavier than the fair share: {was.shared_low:.2f}x-"
        f"{was.shared_top:.2f}x of it"
    )
    print(
        f"  the heaviest lease alone is {was.heaviest:.2f}x the mean host load; fair share once "
        f"each lease heavier than it has a host to itself: {was.fair:.2f}x the mean"
    )
    rounds, asked = 0, 0
    while (n := t.round()) and rounds < MAX_ROUNDS:
        rounds, asked = rounds + 1, asked + n
    now = t.spread()
    moved = sum(1 for n in t.moves.values() if n)
    print(
        f"  by load, after {rounds} rounds ({asked:,} hand-overs, {moved:,} leases moved): "
        f"max/mean {now.top:.2f}x, min/mean {now.low:.2f}x; hosts without a lease heavier than "
        f"the fair share: {now.shared_low:.2f}x-{now.shared_top:.2f}x of it (target within "
        f"{1 - t.rule.tolerance:g}x-{1 + t.rule.tolerance:g}x)"
    )
    before = Counter(t.moves)
    extra = sum(t.round() for _ in range(20))
    again = sum(1 for k, n in (t.moves - before).items() if n and before[k])
    print(
        f"  then 20 more rounds on noisy rates: {extra} hand-over(s), {again} of a lease that "
        "had moved before"
    )
