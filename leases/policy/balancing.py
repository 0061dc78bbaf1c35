"""The balancing decision: which leases this host should acquire or ask to be handed over.

A pure function of one snapshot: no I/O, no clock, no logging, and randomness only from the
`rng` it is given. The loop that lists the table, observes expiry, calls `plan_takes` and writes
the result lives in `processor/host/balancing/balancer.py`.

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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from leases.policy.expiry_tracker import LeaseView
from leases.policy.load_balancing import LoadRule, lease_weights, plan_load_steals
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


def share(
    live: Sequence[LeaseView], leases: int, *, me: HostId, peers: Collection[HostId] = ()
) -> tuple[Counter[HostId], int, int]:
    """How the `leases` (parked ones aside) are shared, from the `live` ones: the leases each
    host holds or was asked to take (a lease asked for counts towards the asker), the number of
    live hosts (those, their owners, `me` and the known live `peers`) and the count target."""
    load = Counter(h for v in live if (h := v.bound_for) is not None)
    hosts = len({v.owner for v in live} | set(load) | {me} | set(peers))
    return load, hosts, math.ceil(leases / hosts)


def plan_takes(
    leases: Sequence[LeaseView],
    *,
    me: HostId,
    limits: BalanceLimits,
    rng: random.Random,
    held: Collection[LeaseToken] | None = None,
    by_load: LoadRule | None = None,
    peers: Collection[HostId] = (),
) -> TakePlan:
    """The leases `me` should take now. `held` lists the leases `me` runs workers for (None: all
    it owns); a lease the table shows as ours but that we do not run (a restart under the same name,
    or a worker that could not release) is taken again, with a new epoch. With `by_load`, hand-overs
    even out the hosts' read rates instead of their lease counts (`leases.policy.load_balancing`);
    free and expired leases are still shared out by count. `peers`: other hosts known to be alive
    (`processor.host.balancing.peer_liveness`), counted like owners: hosts started together
    share from their first ticks."""

    def is_orphan_of_mine(v: LeaseView) -> bool:
        return v.owner == me and held is not None and v.token not in held

    leases = [v for v in leases if not v.lease.parked]
    live = [v for v in leases if v.is_live and not is_orphan_of_mine(v)]
    load, hosts, target = share(live, len(leases), me=me, peers=peers)
    mine = sum(1 for v in live if v.owner == me)
    have = load.pop(me, 0)
    if have < target or by_load is not None:
        take = _acquire(
            leases,
            me=me,
            room=target - have,
            by_load=by_load is not None,
            rng=rng,
            is_orphan_of_mine=is_orphan_of_mine,
        )
        if take:
            return TakePlan(
                target, hosts, mine, acquire=tuple(v.lease for v in take[: limits.max_acquire])
            )
    if by_load is not None:
        weights = lease_weights(v.lease for v in leases)
        steal = plan_load_steals(
            live, weights, me=me, hosts=hosts, rule=by_load, max_steal=limits.max_steal, rng=rng
        )
        return TakePlan(target, hosts, mine, steal=tuple(steal))
    if have >= target:
        return TakePlan(target, hosts, mine)
    steal = _count_steals(live, load, me=me, have=have, target=target, limits=limits, rng=rng)
    return TakePlan(target, hosts, mine, steal=tuple(steal))


def _acquire(
    leases: list[LeaseView],
    *,
    me: HostId,
    room: int,
    by_load: bool,
    rng: random.Random,
    is_orphan_of_mine: Callable[[LeaseView], bool],
) -> list[LeaseView]:
    """The leases `me` may acquire now, best first (see the module docstring), at most `room`.
    By load, a host may hold more leases than the count target: what was handed over to it and
    its own orphans are then taken whatever the room (it asked for them; nobody else may)."""

    def rank(v: LeaseView) -> int | None:
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

    ranked = sorted(
        ((r, v) for v in _shuffled(list(leases), rng) if (r := rank(v)) is not None),
        key=lambda rv: rv[0],
    )
    ours = [v for r, v in ranked if r == 0] if by_load else []
    rest = [v for r, v in ranked if not (by_load and r == 0)]
    return ours + rest[: max(0, room - len(ours))]


def _count_steals(
    live: list[LeaseView],
    load: Counter[HostId],
    *,
    me: HostId,
    have: int,
    target: int,
    limits: BalanceLimits,
    rng: random.Random,
) -> list[Lease]:
    """Hand-overs from the most loaded hosts while they hold 2+ more than `me` would."""
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
    return steal
