"""The segment barrier: pure functions, checked against a model of what each lease finished."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.layout import segment_path
from processor.reading.barrier import has_finished_before, may_enter
from processor.reading.lease_position import LeasePosition

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


@given(positions, positions)
def test_order_follows_the_model(a: tuple[int | None, bool], b: tuple[int | None, bool]) -> None:
    pa, pb = at(a[0], done=a[1]), at(b[0], done=b[1])
    if finished_up_to(*a) < finished_up_to(*b):
        assert pa.is_before(pb)


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
