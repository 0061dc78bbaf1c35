"""The position a lease stores (its continuation): what it reads back as, and what it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.layout import segment_path
from processor.reading.lease_position import LeasePosition

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SEGMENTS = [segment_path(BASE + timedelta(hours=h)) for h in range(12)]


@given(
    st.one_of(st.none(), st.integers(0, 11)), st.booleans(), st.one_of(st.none(), st.integers(0, 3))
)
def test_continuation_round_trips(k: int | None, done: bool, hours: int | None) -> None:
    p = LeasePosition()
    if k is not None:
        inside = ShardPosition() if done else ShardPosition("log/00/x/00000.avro", 40 * k, k)
        p = LeasePosition(SEGMENTS[k], done, inside)
    if hours is not None:
        p = LeasePosition(p.segment, p.is_segment_done, p.shard, BASE + timedelta(hours=hours))
    assert LeasePosition.from_json(p.to_json()) == p


@pytest.mark.parametrize(
    "text", ["not json", '{"v": 2}', '{"v": 1, "segment": 3}', '{"v": 1, "startTime": "soon"}']
)
def test_a_foreign_continuation_is_refused_with_the_lease_named(text: str) -> None:
    with pytest.raises(InvalidContinuation, match="lease 07"):
        LeasePosition.from_json(text, lease="07")
