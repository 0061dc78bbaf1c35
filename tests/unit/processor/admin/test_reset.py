"""`cfp processor reset`'s decisions: where leases go, and which owners are alive."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from leases import HostId, Lease, LeaseToken
from processor.admin.reset import ResetTo, plan_reset, still_held
from processor.reading.lease_position import LeasePosition

NOW = datetime(2026, 11, 25, tzinfo=UTC)
T = datetime(2026, 11, 1, tzinfo=UTC)


def lease(token: str, owner: str | None = None, etag: str = "1") -> Lease:
    return Lease(LeaseToken(token), owner=HostId(owner) if owner else None, etag=etag)


def test_a_reset_keeps_the_end_time_and_leaves_the_scan_alone() -> None:
    leases = [lease("00"), lease("01"), lease("scan-00")]
    end = NOW + timedelta(days=1)
    plan = plan_reset(leases, ResetTo.START_TIME, start_time=T, now=NOW, end_time=end)
    assert [x.token for x in plan.leases] == ["00", "01"]
    assert plan.position == LeasePosition(start_time=T, end_time=end)
    move = plan.move_of(leases[0], NOW)
    assert move.after == plan.position.to_json() and move.reason.startswith("reset to events from")
    begin = plan_reset(leases, ResetTo.BEGINNING, start_time=None, now=NOW, end_time=None)
    assert begin.position == LeasePosition() and begin.describe() == "the beginning of the feed"
    assert plan_reset(leases, ResetTo.NOW, start_time=None, now=NOW, end_time=None).position == (
        LeasePosition(start_time=NOW)
    )


def test_a_reset_past_the_end_time_is_refused() -> None:
    with pytest.raises(ValueError, match="would deliver nothing"):
        plan_reset([lease("00")], ResetTo.NOW, start_time=None, now=NOW, end_time=T)


def test_an_owner_that_renewed_is_alive_one_that_did_not_is_gone() -> None:
    first = [lease("00", "h1", "a"), lease("01", "h2", "b"), lease("02", None, "c")]
    renewed = dataclasses.replace(first[0], etag="a2")
    taken = dataclasses.replace(first[2], owner=HostId("h3"), etag="c2")
    assert still_held(first, [renewed, first[1], first[2]]) == [renewed]
    assert still_held(first, [first[0], first[1], taken]) == [taken]
    assert still_held(first, first) == []
