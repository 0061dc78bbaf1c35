"""The segment barrier and the lease continuation: pure functions, checked against a model."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leases import Lease
from leases.policy.timings import EXPIRY_MARGIN_S, JITTER_FRACTION, derive_timings
from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.layout import segment_path
from processor.reading.barrier import has_finished_before, may_enter
from processor.reading.lease_position import LeasePosition
from processor.reading.position_book import PositionBook
from tests.unit.fakes import ManualClock

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SEGMENTS = [segment_path(BASE + timedelta(hours=h)) for h in range(12)]


def at(k: int | None, *, done: bool) -> LeasePosition:
    if k is None:
        return LeasePosition()
    return LeasePosition(SEGMENTS[k], done, ShardPosition(None if done else "log/00/x/00000.avro"))


def finished_up_to(k: int | None, done: bool) -> int:
    """The model: index of the last segment a lease has completely delivered (-1: none)."""
    if k is None:
        return -1
    return k if done else k - 1


positions = st.tuples(st.one_of(st.none(), st.integers(0, 11)), st.booleans())


@given(st.lists(positions, min_size=1, max_size=8), st.integers(0, 11))
def test_may_enter_matches_the_model(leases: list[tuple[int | None, bool]], target: int) -> None:
    expected = all(finished_up_to(k, d) >= target - 1 for k, d in leases)
    got = may_enter(SEGMENTS[target], SEGMENTS, [at(k, done=d) for k, d in leases])
    assert got == expected


def test_the_first_segment_is_always_open() -> None:
    assert may_enter(SEGMENTS[0], SEGMENTS, [LeasePosition(), at(3, done=False)])


def test_a_lease_that_starts_later_does_not_hold_back_earlier_segments() -> None:
    late = LeasePosition(start_time=BASE + timedelta(hours=8))
    # nothing before hour 6 can hold its events (segment begin + 1h + 1h slack <= start)
    assert has_finished_before(late, SEGMENTS[6], SEGMENTS)
    assert not has_finished_before(late, SEGMENTS[8], SEGMENTS)


@given(positions, st.one_of(st.none(), st.integers(0, 3)))
def test_continuation_round_trips(pos: tuple[int | None, bool], hours: int | None) -> None:
    k, done = pos
    p = at(k, done=done)
    if hours is not None:
        p = LeasePosition(p.segment, p.is_segment_done, p.shard, BASE + timedelta(hours=hours))
    assert LeasePosition.from_json(p.to_json()) == p


@given(positions, positions)
def test_order_follows_the_model(a: tuple[int | None, bool], b: tuple[int | None, bool]) -> None:
    pa, pb = at(a[0], done=a[1]), at(b[0], done=b[1])
    if finished_up_to(*a) < finished_up_to(*b):
        assert pa.is_before(pb)


@pytest.mark.parametrize(
    "text", ["not json", '{"v": 2}', '{"v": 1, "segment": 3}', '{"v": 1, "startTime": "soon"}']
)
def test_a_foreign_continuation_is_refused_with_the_lease_named(text: str) -> None:
    with pytest.raises(InvalidContinuation, match="lease 07"):
        LeasePosition.from_json(text, lease="07")


def test_timings_derive_from_the_expiry() -> None:
    t = derive_timings(30)
    assert (t.renew_every_s, t.acquire_every_s, t.fence_after_s) == (10, 10, 24)
    assert derive_timings(3, renew_every_s=1, acquire_every_s=0.5).acquire_every_s == 0.5
    with pytest.raises(ValueError, match="at most half"):
        derive_timings(10, renew_every_s=6)


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


async def test_the_barrier_book_lists_the_table_at_most_once_per_refresh_interval() -> None:
    listed: list[float] = []
    clock = ManualClock()

    async def lister() -> list[Lease]:
        listed.append(clock.now)
        return []

    book = PositionBook(lister, refresh_s=1.0, clock=clock)
    await book.refresh()
    await book.refresh()  # within the interval: the host's last listing stands
    clock.now += 1.0
    await book.refresh()
    assert listed == [100.0, 101.0]


def test_an_end_time_closes_the_segments_after_it_and_is_kept_through_moves() -> None:
    end = BASE + timedelta(hours=3)
    pos = LeasePosition(start_time=BASE, end_time=end)
    again = LeasePosition.from_json(pos.moved_to(SEGMENTS[3], True).to_json())
    assert again.end_time == end and again.start_time == BASE and not again.finished
    # a segment beginning an hour (the slack) or more after the end cannot hold its events:
    # done with hour 3, the lease has nothing more before any later segment
    assert has_finished_before(again, SEGMENTS[6], SEGMENTS)
    assert not has_finished_before(pos.moved_to(SEGMENTS[2], True), SEGMENTS[6], SEGMENTS)
    done = dataclasses.replace(again, finished=True)
    assert LeasePosition.from_json(done.to_json()).is_finished
    assert not again.is_finished
    with pytest.raises(InvalidContinuation, match="endTime"):
        LeasePosition.from_json('{"v":1,"segment":null,"endTime":"later"}', lease="07")
