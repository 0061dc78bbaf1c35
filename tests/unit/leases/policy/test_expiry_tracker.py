"""`ExpiryTracker`: a lease is expired once its row has not changed for the expiry, on the
tracker's own clock (never on another host's)."""

from __future__ import annotations

import dataclasses

from leases.policy.expiry_tracker import ExpiryTracker
from leases.record import HostId, Lease, LeaseToken


def make_lease(token: str, owner: str | None) -> Lease:
    return Lease(token=LeaseToken(token), owner=None if owner is None else HostId(owner), epoch=1)


def test_the_tracker_judges_by_unchanged_time_on_its_own_clock() -> None:
    tracker = ExpiryTracker(expiry_s=30.0)
    a, b = make_lease("a", "h0"), make_lease("b", "h1")
    first = tracker.observe([a, b], now=100.0)
    assert [v.is_expired for v in first] == [False, False]  # first seen: as if just changed
    assert [v.is_expired for v in tracker.observe([a, b], now=129.9)] == [False, False]
    b2 = dataclasses.replace(b, version=b.version + 1)
    views = tracker.observe([a, b2], now=130.0)
    assert [v.is_expired for v in views] == [True, False]  # a unchanged for 30 s; b renewed
    assert views[0].lease == a and not views[0].is_live
    c = make_lease("c", "h2")
    later = tracker.observe([a, b2, c], now=1000.0)
    assert [v.is_expired for v in later] == [True, True, False]  # c is new
    # a lease gone from a listing is forgotten: when it comes back, it counts as new
    assert [v.is_expired for v in tracker.observe([b2], now=1001.0)] == [True]
    assert [v.is_expired for v in tracker.observe([a], now=1002.0)] == [False]


def test_the_tracker_counts_a_hand_over_request_as_a_change() -> None:
    tracker = ExpiryTracker(expiry_s=10.0)
    a = make_lease("a", "h0")
    tracker.observe([a], now=0.0)
    asked = dataclasses.replace(a, next_owner=HostId("h1"))
    assert not tracker.observe([asked], now=10.0)[0].is_expired
    assert tracker.observe([asked], now=20.0)[0].is_expired


def test_the_tracker_says_when_to_list_again_to_catch_the_first_expiry() -> None:
    tracker = ExpiryTracker(expiry_s=10.0)
    mine, theirs, free = make_lease("a", "h0"), make_lease("b", "h1"), make_lease("c", None)
    assert tracker.next_expiry(HostId("h0")) is None  # nothing seen yet
    tracker.observe([mine, theirs, free], now=0.0)
    renewed = dataclasses.replace(theirs, version=theirs.version + 1)
    tracker.observe([mine, renewed, free], now=4.0)
    # free (seen at 0) would expire at 10, theirs (changed at 4) at 14; our own never counts
    assert tracker.next_expiry(HostId("h0")) == 10.0
    tracker.observe([mine, renewed, free], now=10.0)  # free is expired now: only theirs is due
    assert tracker.next_expiry(HostId("h0")) == 14.0
    assert tracker.next_expiry(HostId("h1")) is None  # for h1: the others expired at 10
