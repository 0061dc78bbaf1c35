"""Balancing by load (`--balance-by load`): which leases a host should ask to be handed over so
that every host carries about the same share of the read rate, not the same number of leases.

Pure, like `plan_takes` (which calls it in place of its count-based steals): no I/O, no clock,
randomness only from the `rng` given. Each host decides for itself from its own snapshot: there is
no leader, and a host only ever asks for leases (the owner hands them over after its batch).

Rule, over the live leases:
- a lease weighs its owner's last written read rate (`Lease.load`, bytes/s) plus a floor, a small
  share of the mean lease rate (at least 1 byte/s): leases nobody measured yet still count, and a
  processor at rest (every rate 0) balances by count;
- the fair share M is the mean load per host once every lease heavier than the mean of the rest
  has a host to itself (`fair_share`): a Zipf-hot shard cannot be split, so the others even out
  around what is left rather than around a mean it inflates;
- a host takes only while below M: from any host above M when it carries less than
  (1 - tolerance) M (or nothing), else only from hosts above (1 + tolerance) M. Between those
  bands nothing moves;
- it takes from the most loaded such host a lease that leaves both inside the inner band: itself
  at most (1 + tolerance/2) M, the giver at least (1 - tolerance/2) M, and the pair closer than
  before (weight < their difference). Exceptions: a host holding nothing may take any one lease,
  and a host below M any lease whose giver stays above (1 + tolerance) M without it (two hot
  shards on one host part, a hot shard's host sheds its cold ones; the taker then sheds what it
  has too much). The giver, still well above M, never takes the lease back. Rates that
  wander by less than about tolerance/4 therefore never undo a move, and every move lowers the
  sum of squared host loads, so moves stop;
- at most `max_steal` requests per tick, as by count.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from leases.policy.expiry_tracker import LeaseView
from leases.record import HostId, Lease, LeaseToken

MIN_WEIGHT = 1.0  # bytes/s a lease weighs at least
FLOOR_SHARE = 0.05  # of the mean lease rate, added to every lease


@dataclass(frozen=True, slots=True)
class LoadRule:
    """How far from its fair share of the load (the module docstring's M) a host may drift
    before leases move: within (1 +/- tolerance) x M nothing moves."""

    tolerance: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"load tolerance {self.tolerance} must be between 0 and 1")


def lease_weights(leases: Iterable[Lease]) -> dict[LeaseToken, float]:
    """Each lease's weight: its read rate plus the floor (see the module docstring)."""
    rates = {x.token: max(0.0, x.load) for x in leases}
    floor = max(MIN_WEIGHT, FLOOR_SHARE * sum(rates.values()) / len(rates)) if rates else 0.0
    return {token: rate + floor for token, rate in rates.items()}


def fair_share(weights: Iterable[float], hosts: int) -> float:
    """The load a host should carry: the mean, once each lease heavier than the mean of the
    others has a host of its own (those hosts carry their lease, whatever it weighs)."""
    heaviest_first = sorted(weights, reverse=True)
    rest, alone = sum(heaviest_first), 0
    for w in heaviest_first:
        if hosts - alone <= 1 or w <= rest / (hosts - alone):
            break
        rest, alone = rest - w, alone + 1
    return rest / (hosts - alone)


def host_loads(live: Iterable[LeaseView], weights: dict[LeaseToken, float]) -> dict[HostId, float]:
    """The load each host will carry: a lease asked for counts towards the asker."""
    loads: dict[HostId, float] = {}
    for v in live:
        if (host := v.bound_for) is not None:
            loads[host] = loads.get(host, 0.0) + weights[v.token]
    return loads


def plan_load_steals(
    live: Sequence[LeaseView],
    weights: dict[LeaseToken, float],
    *,
    me: HostId,
    hosts: int,
    rule: LoadRule,
    max_steal: int,
    rng: random.Random,
) -> list[Lease]:
    """The hand-overs `me` should ask for: `live` are the live, unparked leases, `weights` weigh
    every lease that needs an owner (free ones included: they count in the mean), `hosts` is how
    many hosts share them."""
    loads = host_loads(live, weights)
    mean = fair_share(weights.values(), hosts)
    tol = rule.tolerance
    mine = loads.pop(me, 0.0)
    if mine and mine >= mean:
        return []
    above = mean if mine < (1 - tol) * mean or not mine else (1 + tol) * mean  # who may give
    band = _Band(mean, tol, above)
    offered: dict[HostId, list[LeaseView]] = {}
    for v in sorted(live, key=lambda v: v.token):  # the plan depends on the set, not the order
        if v.owner is not None and v.owner != me and v.lease.next_owner is None:
            offered.setdefault(v.owner, []).append(v)
    steals: list[Lease] = []
    while len(steals) < max_steal and (mine < mean or (not steals and not mine)):
        choice = _best_move(offered, loads, weights, mine=mine, band=band, rng=rng)
        if choice is None:
            break
        giver, v = choice
        offered[giver].remove(v)
        loads[giver] -= weights[v.token]
        mine += weights[v.token]
        steals.append(v.lease)
    return steals


@dataclass(frozen=True, slots=True)
class _Band:
    """The fair share M, the tolerance around it, and the load above which a host gives."""

    mean: float
    tol: float
    above: float


def _best_move(
    offered: dict[HostId, list[LeaseView]],
    loads: dict[HostId, float],
    weights: dict[LeaseToken, float],
    *,
    mine: float,
    band: _Band,
    rng: random.Random,
) -> tuple[HostId, LeaseView] | None:
    """From the most loaded host carrying more than `band.above` that has one, the lease that
    brings the pair closest together while both stay inside the inner band; None when none has
    one."""
    givers = sorted(
        (h for h, load in loads.items() if load > band.above and offered.get(h)),
        key=lambda h: (-loads[h], h),
    )
    for giver in givers:
        have = loads[giver]
        fits = [v for v in offered[giver] if _fits(weights[v.token], have, mine, band)]
        if fits:
            gap = min(abs(have - mine - 2 * weights[v.token]) for v in fits)
            best = [v for v in fits if abs(have - mine - 2 * weights[v.token]) == gap]
            return giver, rng.choice(best)
    return None


def _fits(w: float, have: float, mine: float, band: _Band) -> bool:
    """Whether a lease of weight `w` may go from a host carrying `have` to one carrying `mine`:
    the pair ends closer, the giver inside the inner band, and the taker too, unless it holds
    nothing or the giver stays above (1 + tolerance) M without the lease."""
    mean, tol = band.mean, band.tol
    if not (w < have - mine and have - w >= (1 - tol / 2) * mean):
        return False
    return not mine or mine + w <= (1 + tol / 2) * mean or have - w > (1 + tol) * mean
