"""Which segments and events a read selects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.selection import (
    EventFilter,
    TimeRange,
    consumable_segments,
    event_times,
    parse_event_time,
)
from processor.changefeed.storage.layout import segment_path

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOURS = [T0 + timedelta(hours=h) for h in range(10)]
PATHS = ["idx/segments/1601/01/01/0000/meta.json", *(segment_path(t) for t in HOURS)]
times = st.integers(0, 10 * 3600).map(lambda s: T0 + timedelta(seconds=s))


def test_init_segment_and_unconsumable_segments_are_skipped() -> None:
    got = consumable_segments(
        PATHS, last_consumable=HOURS[4], after=None, include_after=True, window=TimeRange()
    )
    assert got == [segment_path(t) for t in HOURS[:5]]
    assert (
        consumable_segments(
            PATHS, last_consumable=None, after=None, include_after=True, window=TimeRange()
        )
        == []
    )


def test_resuming_after_a_segment() -> None:
    kw = {"last_consumable": HOURS[9], "window": TimeRange()}
    after = segment_path(HOURS[3])
    assert consumable_segments(PATHS, after=after, include_after=True, **kw)[0] == after
    assert consumable_segments(PATHS, after=after, include_after=False, **kw)[0] == segment_path(
        HOURS[4]
    )


@given(times, times, st.integers(-15 * 60, 75 * 60), st.sampled_from(HOURS))
def test_a_segment_that_may_hold_an_event_of_the_range_is_selected(a, b, offset_s, begin) -> None:  # type: ignore[no-untyped-def]
    start, end = min(a, b), max(a, b)
    event = begin + timedelta(seconds=offset_s)  # the service's +/- 15 minute slop
    if start <= event < end:
        assert TimeRange(start, end).segment_may_hold(begin)


def test_segments_far_outside_the_range_are_not_selected() -> None:
    r = TimeRange(HOURS[4], HOURS[5])
    chosen = consumable_segments(
        PATHS, last_consumable=HOURS[9], after=None, include_after=True, window=r
    )
    assert chosen == [segment_path(t) for t in HOURS[3:6]]


def rec(event_type: str, t: str) -> dict[str, object]:
    return {"eventType": event_type, "eventTime": t}


def kept(f: EventFilter, records: list[dict[str, object]]) -> list[bool]:
    keep = f.mask(pa.Table.from_pylist(records))
    return [True] * len(records) if keep is None else keep.to_pylist()


def test_event_filter() -> None:
    f = EventFilter(
        window=TimeRange(
            parse_event_time("2026-01-01T00:10:00Z"), parse_event_time("2026-01-01T00:20:00Z")
        )
    )
    batch = [
        rec("BlobCreated", "2026-01-01T00:10:00.0000000Z"),
        rec("BlobCreated", "2026-01-01T00:09:59.9999999Z"),
        rec("BlobCreated", "2026-01-01T00:20:00.0000000Z"),
        rec("Control", "2026-01-01T00:15:00.0000000Z"),
        rec("BlobCreated", "2026-01-01T00:15:00+00:00"),
    ]
    assert kept(f, batch) == [True, False, False, False, True]
    # one odd time makes each be parsed on its own; it is outside any range
    odd = [*batch, rec("BlobCreated", "2026-01-01T00:15:00"), rec("BlobCreated", "soon")]
    assert kept(f, odd) == [True, False, False, False, True, True, False]
    assert kept(EventFilter(include_control=True), [rec("Control", "x")]) == [True]
    typed = EventFilter(change=ChangeFilter.of(event_types=["BlobDeleted"]))
    assert kept(typed, [rec("BlobDeleted", "x"), rec("BlobCreated", "x")]) == [True, False]
    with_control = EventFilter(
        change=ChangeFilter.of(event_types=["BlobDeleted"]), include_control=True
    )
    assert kept(with_control, [rec("Control", "x"), rec("BlobCreated", "x")]) == [True, False]


def test_seven_digit_event_times_parse() -> None:
    t = parse_event_time("2022-11-28T21:43:23.6463937Z")
    assert t == datetime(2022, 11, 28, 21, 43, 23, 646393, tzinfo=UTC)


TIMES = ["2026-01-01T00:00:00.1234567Z", "2026-01-01T01:00:00", "yesterday"]


def test_event_times_are_utc_microseconds_and_null_where_unreadable() -> None:
    assert event_times(pa.table({"eventTime": TIMES})).to_pylist() == [
        datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 1, 1, 1, tzinfo=UTC),  # no offset: UTC
        None,
    ]
