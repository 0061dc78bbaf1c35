"""The fault schedule of a chaos run: a pure function of the seed, so a run can be replayed.

Kinds:
- `kill`: SIGKILL a host, restart it `length_s` later;
- `pause`: SIGSTOP a host for `length_s` (past the lease expiry), then SIGCONT: a zombie;
- `term`: SIGTERM a host (a planned move), restart it `length_s` later;
- `azurite`: stop Azurite, start it again on the same data folder `length_s` later;
- `drop`: the proxy between hosts and Azurite cuts every connection and refuses new ones for
  `length_s`;
- `delay`: the proxy holds every chunk of bytes for `skew_s` seconds, for `length_s`;
- `skew`: restart a host (SIGTERM) with its wall clock shifted by `skew_s` seconds;
- `server`: SIGKILL a Spark Connect server (`cfp spark-connect` itself: its JVM goes with it),
  start it again on its port `length_s` later; with several servers `host` picks which
  (`server_index`: one of them, or all at once).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("kill", "pause", "term", "azurite", "drop", "delay", "skew", "server")
ALL_SERVERS = -1


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # seconds after the faults start
    kind: str
    host: int
    length_s: float
    skew_s: float = 0.0

    def describe(self) -> str:
        extra = f" skew={self.skew_s:+.0f}s" if self.kind == "skew" else ""
        extra += f" each={self.skew_s:.2f}s" if self.kind == "delay" else ""
        return f"t+{self.at_s:6.1f}s {self.kind:<7} h{self.host} for {self.length_s:.1f}s{extra}"


def make_schedule(
    seed: int,
    *,
    duration_s: float,
    hosts: int,
    expiry_s: float,
    kinds: tuple[str, ...] = KINDS,
    gap_s: tuple[float, float] = (4.0, 10.0),
) -> list[Fault]:
    """Faults at random times in [0, duration_s), one kind and one host each, seeded."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"fault kinds must be among {KINDS}, got {kinds}")
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.uniform(*gap_s) / 2
    while t < duration_s:
        kind = rng.choice(kinds)
        host = rng.randrange(hosts)
        skew = 0.0
        if kind == "pause":
            length = expiry_s * rng.uniform(1.3, 2.5)  # long enough to lose the leases
        elif kind == "delay":
            length, skew = rng.uniform(2.0, 8.0), rng.uniform(0.05, 0.6)
        elif kind == "skew":
            length, skew = rng.uniform(0.5, 2.0), rng.choice((-1, 1)) * rng.uniform(60, 900)
        elif kind == "server":  # down long enough for every host to notice, then started again
            length = rng.uniform(3.0, 12.0)
        else:
            length = rng.uniform(0.5, 6.0)
        # `t` as it is: rounded, a fault just before the end could land on or after it
        faults.append(Fault(t, kind, host, round(length, 2), round(skew, 2)))
        t += rng.uniform(*gap_s)
    return faults


def server_index(fault: Fault, servers: int) -> int:
    """Which of `servers` a `server` fault kills: one, or with several, now and then all of them
    at once (`ALL_SERVERS`: the hosts then wait for a restart instead of moving)."""
    if servers <= 1:
        return 0
    which = fault.host % (servers + 1)
    return ALL_SERVERS if which == servers else which
