"""The balancing decision: which leases this host should acquire or ask to be handed over.

A pure function of one snapshot: no I/O, no clock, no logging, and randomness only from the
`rng` it is given. The loop that lists the table, observes expiry, calls `plan_takes` and writes
the result lives in `processor/host/balancer.py`.

Policy:
- live hosts are the owners of live leases, the hosts that asked for one of them, and this
  host; target = ceil(leases / live hosts). A live lease asked for by another host counts
  towards the asker, not the owner, so that several hosts joining at once do not all ask the
  same owner for more than it should give;
- parked leases (stopped on bad data or a poison batch until an operator acts) are not work:
  nobody takes them and they do not count towards the target;
- free and expired leases come first: a free lease whose hand-over was requested by this host,
  then other free leases (except ones reserved for another host, and ones released with an error,
  which wait one expiry interval), then expired ones; at most
  `max_acquire` per tick and never beyond the target;
- only when nothing is free: take from the most loaded host while it holds at least two more than
  this host would, at most `max_steal` per tick and never beyond the target. Those become
  hand-over requests: the owner finishes its batch, checkpoints and releases.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from leases.expiry import LeaseView
from leases.record import HostId, Lease, LeaseToken


@dataclass(frozen=True, slots=True)
class BalanceLimits:
    max_acquire: int = 64  # leases acquired per tick (free or expired)
    max_steal: int = 16  # hand-over requests per tick


@dataclass(frozen=True, slots=True)
class TakePlan:
    target: int
    hosts: int
    mine: int
    acquire: tuple[Lease, ...] = ()
    steal: tuple[Lease, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.acquire and not self.steal


def _shuffled(views: list[LeaseView], rng: random.Random) -> list[LeaseView]:
    ordered = sorted(views, key=lambda v: v.token)  # the plan depends on the set, not the order
    rng.shuffle(ordered)
    return ordered


def _bound_for(v: LeaseView) -> HostId:
    """The host a live lease will belong to: whoever asked for it, else its owner."""
    asked_by = v.lease.next_owner
    owner = v.owner
    assert owner is not None
    return asked_by if asked_by is not None and asked_by != owner else owner


def plan_takes(
    leases: Sequence[LeaseView],
    *,
    me: HostId,
    limits: BalanceLimits,
    rng: random.Random,
    held: Collection[LeaseToken] | None = None,
) -> TakePlan:
    """The leases `me` should take now. `held` lists the leases `me` runs workers for (None: all
    it owns); a lease the table shows as ours but that we do not run (a restart under the same
    name, or a worker that could not release) is taken again, with a new epoch."""

    def is_orphan_of_mine(v: LeaseView) -> bool:
        return v.owner == me and held is not None and v.token not in held

    leases = [v for v in leases if not v.lease.parked]
    live = [v for v in leases if v.is_live and not is_orphan_of_mine(v)]
    load = Counter(_bound_for(v) for v in live)
    hosts = len({v.owner for v in live} | set(load) | {me})
    target = math.ceil(len(leases) / hosts)
    mine = sum(1 for v in live if v.owner == me)
    have = load.pop(me, 0)
    if have >= target:
        return TakePlan(target, hosts, mine)

    def acquirable_rank(v: LeaseView) -> int | None:
        if v.owner == me:
            return 0 if is_orphan_of_mine(v) else None
        if v.owner is None:
            reserved_for = v.lease.next_owner
            if reserved_for == me:
                return 0
            if v.lease.error:  # it failed with its last owner: retry once per expiry interval
                return 2 if v.is_expired else None
            return 1 if reserved_for is None or v.is_expired else None
        return 2 if v.is_expired else None

    ranked = [(acquirable_rank(v), v) for v in _shuffled(list(leases), rng)]
    free = [
        v for rank, v in sorted(((r, v) for r, v in ranked if r is not None), key=lambda rv: rv[0])
    ]
    if free:
        take = free[: min(target - have, limits.max_acquire)]
        return TakePlan(target, hosts, mine, acquire=tuple(v.lease for v in take))

    by_owner: dict[HostId, list[LeaseView]] = {}
    for v in _shuffled(live, rng):
        if v.owner is not None and v.owner != me and v.lease.next_owner is None:
            by_owner.setdefault(v.owner, []).append(v)
    steal: list[Lease] = []
    while len(steal) < limits.max_steal and have + len(steal) < target:
        loads = {h: n for h, n in load.items() if by_owner.get(h)}
        most = max(loads.values(), default=0)
        if most - (have + len(steal)) < 2:
            break
        victims = sorted(h for h, n in loads.items() if n == most)
        victim = rng.choice(victims)
        steal.append(by_owner[victim].pop().lease)
        load[victim] -= 1
    return TakePlan(target, hosts, mine, steal=tuple(steal))
