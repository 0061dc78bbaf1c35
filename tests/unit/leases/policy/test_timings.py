"""Every interval of the lease protocol, derived from the lease expiry."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leases.policy.timings import (
    EXPIRY_MARGIN_S,
    JITTER_FRACTION,
    MIN_HANDOVER_WAIT_S,
    derive_timings,
)


def test_timings_derive_from_the_expiry() -> None:
    t = derive_timings(30)
    assert (t.renew_every_s, t.acquire_every_s, t.fence_after_s) == (10, 10, 24)
    assert derive_timings(3, renew_every_s=1, acquire_every_s=0.5).acquire_every_s == 0.5
    with pytest.raises(ValueError, match="at most half"):
        derive_timings(10, renew_every_s=6)


@given(st.floats(0.1, 600))
def test_a_hand_over_is_forced_after_two_expiries_and_never_before_the_owner_could_write(
    expiry_s: float,
) -> None:
    wait = derive_timings(expiry_s).handover_timeout_s
    assert wait >= 2 * expiry_s and wait >= MIN_HANDOVER_WAIT_S
    assert wait == 2 * expiry_s or wait == MIN_HANDOVER_WAIT_S


@given(
    st.floats(-JITTER_FRACTION, JITTER_FRACTION),
    st.none() | st.floats(-100, 100),
    st.floats(0, 100),
)
def test_the_next_look_is_the_jittered_interval_or_just_after_a_lease_expires(
    jitter: float, due: float | None, now: float
) -> None:
    t = derive_timings(30)
    pause = t.next_look_in_s(jitter=jitter, due=due, now=now)
    assert 0 < pause <= t.acquire_every_s * (1 + JITTER_FRACTION)
    if due is None or due - now + EXPIRY_MARGIN_S >= t.acquire_every_s * (1 + jitter):
        assert pause == t.acquire_every_s * (1 + jitter)
    else:  # a watched lease expires first: look just after it (at once if it has already)
        assert pause == max(0.0, due - now) + EXPIRY_MARGIN_S


@given(st.integers(0, 2**32), st.none() | st.floats(0, 100))
def test_a_look_is_jittered_and_never_later_than_just_after_the_next_expiry(
    seed: int, due_in: float | None
) -> None:
    timings, now = derive_timings(30), 1000.0
    pause = timings.next_look(
        random.Random(seed), due=None if due_in is None else now + due_in, now=now
    )
    every = timings.acquire_every_s
    soonest = every * (1 - JITTER_FRACTION)
    assert pause <= every * (1 + JITTER_FRACTION)
    if due_in is None:
        assert pause >= soonest
    else:
        close = due_in + EXPIRY_MARGIN_S
        assert min(soonest, close) - 1e-9 <= pause <= close + 1e-9


def test_hosts_started_together_look_at_different_times() -> None:
    timings = derive_timings(30)
    looks = {timings.next_look(random.Random(seed), due=None, now=0) for seed in range(8)}
    assert len(looks) == 8
