"""Every interval of the lease protocol, derived from the lease expiry unless set explicitly."""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_EXPIRY_S = 30.0
DEFAULT_POLL_S = 5.0
DEFAULT_STUCK_AFTER_S = 300.0  # a lease failing (or not moving) this long is reported STUCK
# Share of the expiry after the last successful renewal when a host stops using a lease (fences
# itself). Other hosts judge expiry from when they saw our write, which is after we sent it, so
# stopping at 80 % of the interval after sending leaves a fifth of it as margin.
FENCE_FRACTION = 0.8
# Balancing ticks vary by up to this share so that hosts started together do not collide.
JITTER_FRACTION = 0.2
# Look at a lease this long after it would expire, so that it has by then.
EXPIRY_MARGIN_S = 0.05
# A lease asked for is taken by force no sooner than this: its owner may first have to land the
# writes its observer holds (a Delta commit after a Spark server restart takes tens of seconds),
# which do not get shorter with the lease expiry. KCL 3.x's graceful hand-off waits 30 s too.
MIN_HANDOVER_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class Timings:
    expiry_s: float
    renew_every_s: float
    acquire_every_s: float
    poll_s: float

    @property
    def fence_after_s(self) -> float:
        return self.expiry_s * FENCE_FRACTION

    @property
    def request_timeout_s(self) -> float:
        """One lease-store request; a renewal must not wait longer than its own interval."""
        return max(0.5, min(5.0, self.renew_every_s))

    @property
    def handover_timeout_s(self) -> float:
        """After asking for a lease this long ago without getting it, take it by force: the owner
        renews but does not let go (a stuck observer, or an older cfp without hand-over). Two
        expiries, and never less than `MIN_HANDOVER_WAIT_S`."""
        return max(2 * self.expiry_s, MIN_HANDOVER_WAIT_S)

    def next_look_in_s(self, *, jitter: float, due: float | None, now: float) -> float:
        """Seconds until the next look at the lease table: the acquire interval stretched by
        `jitter` (a share, within +-`JITTER_FRACTION`), or less when a lease watched on the
        monotonic clock expires at `due` before then, so that the look right after it takes
        a crashed host's lease without waiting a whole interval more."""
        pause = self.acquire_every_s * (1 + jitter)
        if due is not None:
            pause = min(pause, max(0.0, due - now) + EXPIRY_MARGIN_S)
        return pause

    def next_look(self, rng: random.Random, *, due: float | None, now: float) -> float:
        """`next_look_in_s` with a jitter drawn from `rng`: the one rule by which the balancer and
        every job runner look at the lease table again, so that hosts started together do not
        look together."""
        jitter = rng.uniform(-JITTER_FRACTION, JITTER_FRACTION)
        return self.next_look_in_s(jitter=jitter, due=due, now=now)

    @property
    def barrier_refresh_s(self) -> float:
        """How often a worker waiting at the segment barrier re-reads the other leases."""
        return min(self.poll_s, 1.0)


def derive_timings(
    expiry_s: float = DEFAULT_EXPIRY_S,
    *,
    renew_every_s: float | None = None,
    acquire_every_s: float | None = None,
    poll_s: float = DEFAULT_POLL_S,
) -> Timings:
    """Renew at a third of the expiry (two renewals may fail before the lease is at risk);
    balance at a third as well, so a dead host's leases are taken within expiry + one tick.

    Raises:
        ValueError: an interval that cannot work (renewing less often than twice per expiry).
    """
    if expiry_s <= 0 or poll_s <= 0:
        raise ValueError("lease expiration and poll interval must be positive")
    renew = expiry_s / 3 if renew_every_s is None else renew_every_s
    acquire = expiry_s / 3 if acquire_every_s is None else acquire_every_s
    if not 0 < renew <= expiry_s / 2:
        raise ValueError(
            f"--renew-interval {renew:g}s must be at most half of --lease-expiration {expiry_s:g}s"
        )
    if acquire <= 0:
        raise ValueError("--acquire-interval must be positive")
    return Timings(expiry_s, renew, acquire, poll_s)
