"""Quiet ticks (`leases/policy/watching.py`): which slices a settled host lists, and how it judges the
rows it did not list."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from leases.policy.expiry_tracker import ExpiryTracker, LeaseView
from leases.policy.watching import (
    EVERYTHING,
    WATCHERS,
    TableView,
    balance_note,
    expired_to_take,
    full_listing_every,
    in_ranges,
    is_settled,
    needs_full_listing,
    ranges_to_list,
    watch_ranges,
)
from leases.record import HostId, Lease, LeaseToken
from leases.reserved_rows import RESERVED_ROWS_FROM, BalanceNote

EXPIRY = 10.0
tokens_st = st.sets(st.text("0123456789abcdef/", min_size=1, max_size=6), max_size=60)
hosts_st = st.sets(st.integers(0, 99), min_size=1, max_size=30).map(
    lambda ns: [HostId(f"h{n:02d}") for n in sorted(ns)]
)


@settings(max_examples=200, deadline=None)
@given(tokens_st, hosts_st, st.lists(st.text("0123456789abcdef/~", max_size=6), max_size=20))
def test_the_hosts_watch_every_key_watchers_times_and_share_it_evenly(
    tokens: set[str], hosts: list[HostId], others: list[str]
) -> None:
    plans = {h: watch_ranges(tokens, hosts, h) for h in hosts}
    times = min(WATCHERS, len(hosts)) if len(hosts) > WATCHERS else 1
    for key in [*tokens, *(k for k in others if k < RESERVED_ROWS_FROM)]:  # new tokens too
        watched = sum(in_ranges(key, ranges) for ranges in plans.values())
        assert watched == (len(hosts) if len(hosts) <= WATCHERS else times), key
    for ranges in plans.values():
        assert 1 <= len(ranges) <= 2 or not ranges
        assert all(lo < hi <= RESERVED_ROWS_FROM for lo, hi in ranges)
        share = sum(1 for t in tokens if in_ranges(t, ranges))
        if len(hosts) > WATCHERS:
            assert share <= WATCHERS * math.ceil(len(tokens) / len(hosts))


def test_two_hosts_or_fewer_list_everything() -> None:
    assert watch_ranges(["a", "b"], [HostId("h1")], HostId("h2")) == [EVERYTHING]


def test_the_safety_net_lists_everything_about_once_per_ten_ticks_across_the_processor() -> None:
    assert full_listing_every(3) == 60
    assert full_listing_every(1_000) == 10_000


def lease(token: str, owner: str | None, version: int = 1, **kw: object) -> Lease:
    return Lease(
        LeaseToken(token),
        owner=None if owner is None else HostId(owner),
        epoch=1,
        version=version,
        **kw,  # type: ignore[arg-type]
    )


def quiet_view(rows: list[Lease]) -> TableView:
    view = TableView(ExpiryTracker(EXPIRY), {})
    view.listed(rows, 0.0, [EVERYTHING])
    return view


def test_rows_not_listed_are_presumed_live_until_their_owner_lets_a_watched_one_expire() -> None:
    view = quiet_view([lease("a", "h1"), lease("b", "h2"), lease("c", "h2"), lease("d", "h3")])
    # 20 s later h3 watches a-b only: "a" renewed, "b" not: h2 is gone, and so is its "c"
    fresh, views = view.listed([lease("a", "h1", 2), lease("b", "h2")], 20.0, [("a", "c")])
    assert [(v.token, v.is_expired) for v in fresh] == [("a", False), ("b", True)]
    judged = {v.token: v.is_expired for v in views}
    assert judged == {"a": False, "b": True, "c": True, "d": False}


def test_a_suspect_owners_rows_seen_less_than_an_expiry_ago_are_not_expired_yet() -> None:
    view = quiet_view([lease("b", "h2"), lease("c", "h2")])
    view.listed([lease("b", "h2"), lease("c", "h2", 2)], 5.0, [EVERYTHING])  # c renewed at 5
    _, views = view.listed([lease("b", "h2")], 12.0, [("a", "c")])
    assert {v.token: v.is_expired for v in views} == {"b": True, "c": False}


def test_rows_gone_from_a_listed_range_are_forgotten_and_others_kept() -> None:
    view = quiet_view([lease("a", "h1"), lease("b", "h1"), lease("x", "h2")])
    _, views = view.listed([lease("a", "h1", 2)], 1.0, [("a", "m")])
    assert sorted(v.token for v in views) == ["a", "x"]
    assert view.hosts() == {"h1", "h2"}


def test_a_quiet_view_asks_the_tracker_only_about_what_it_listed() -> None:
    view = quiet_view([lease("a", "h1"), lease("x", "h2")])
    view.listed([lease("a", "h1", 2)], 3.0, [("a", "m")])
    assert view.tracker.next_expiry(HostId("h9")) == 3.0 + EXPIRY  # not x's, seen at 0


def test_settled_means_nothing_free_expired_asked_or_orphaned_in_what_was_listed() -> None:
    me, held = HostId("h1"), {LeaseToken("a")}
    view = quiet_view([lease("a", "h1"), lease("b", "h2")])
    fresh, _ = view.listed([lease("a", "h1", 2), lease("b", "h2", 2)], 1.0, [EVERYTHING])
    assert is_settled(fresh, me=me, held=held)
    for odd in (
        lease("b", None),
        lease("b", "h2", next_owner=HostId("h3")),
        lease("b", "h1"),  # ours in the table, but not run here
    ):
        fresh, _ = view.listed([lease("a", "h1", 3), odd], 2.0, [EVERYTHING])
        assert not is_settled(fresh, me=me, held=held), odd
    fresh, _ = view.listed([lease("a", "h1", 3), lease("b", None, parked=True)], 3.0, [EVERYTHING])
    assert is_settled(fresh, me=me, held=held)  # a parked lease waits for an operator


def test_a_host_lists_everything_until_settled_then_its_slices_then_everything_again() -> None:
    rows = [lease(f"{i:02d}", f"h{i % 4}") for i in range(40)]
    view, me = quiet_view(rows), HostId("h1")
    assert ranges_to_list(view, me, settled=False, ticks_since_full=1) == [EVERYTHING]
    assert ranges_to_list(view, me, settled=True, ticks_since_full=None) == [EVERYTHING]
    quiet = ranges_to_list(view, me, settled=True, ticks_since_full=1)
    assert quiet != [EVERYTHING] and sum(in_ranges(x.token, quiet) for x in rows) == 20
    assert ranges_to_list(view, me, settled=True, ticks_since_full=60) == [EVERYTHING]


def test_the_note_tells_a_settled_host_whether_it_could_act() -> None:
    views = [
        LeaseView(lease(t, o))
        for t, o in [("a", "h1"), ("b", "h1"), ("c", "h1"), ("d", "h1"), ("e", "h2")]
    ]
    views.append(LeaseView(lease("f", "h3"), is_expired=True))
    note = balance_note(views, HostId("h2"))
    assert note == BalanceNote(target=3, most=4, unowned=1)  # h1 and h2 live: 6 / 2
    assert needs_full_listing(note, 1)  # h2 (1) could ask h1 (4) for one
    assert needs_full_listing(note, 2)  # under the target while one is unowned
    assert not needs_full_listing(BalanceNote(3, 4, 0), 3)
    assert not needs_full_listing(None, 0)
    view = quiet_view([lease("a", "h1"), lease("b", "h2"), lease("c", "h3")])
    quiet = ranges_to_list(view, HostId("h1"), settled=True, ticks_since_full=1)
    assert quiet != [EVERYTHING]
    loud = ranges_to_list(view, HostId("h1"), settled=True, ticks_since_full=1, note=note, mine=1)
    assert loud == [EVERYTHING]


def test_a_watcher_takes_the_expired_leases_it_sees_that_the_plan_does_not() -> None:
    fresh = [
        LeaseView(lease("a", "h1")),
        LeaseView(lease("b", "h2"), is_expired=True),
        LeaseView(lease("c", "h2"), is_expired=True),
        LeaseView(lease("d", None), is_expired=True),  # free: for the hosts under target
        LeaseView(lease("e", "h2", parked=True), is_expired=True),
    ]
    planned = [fresh[1].lease]
    assert [x.token for x in expired_to_take(fresh, planned)] == ["c"]


def test_a_host_seen_releasing_a_lease_for_nobody_counts_as_leaving() -> None:
    view = quiet_view([lease("a", "h1"), lease("b", "h2"), lease("c", "h2"), lease("d", "h3")])
    _, views = view.listed([lease("a", "h1", 2), lease("b", None, 2)], 1.0, [("a", "c")])
    assert {v.token: v.is_live for v in views} == {"a": True, "b": False, "c": False, "d": True}
    # a hand-over to someone, or a release with an error, is not leaving
    for odd in (lease("c", None, 2, next_owner=HostId("h1")), lease("c", None, 2, error="bug")):
        view = quiet_view([lease("c", "h2"), lease("x", "h2")])
        _, views = view.listed([odd], 1.0, [("c", "d")])
        assert {v.token: v.is_live for v in views}["x"], odd
