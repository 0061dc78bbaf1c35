"""The chaos suite's own checks: a seeded schedule replays exactly, and each invariant check
fails on the history it exists to catch."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leases import HostId, Lease, LeaseToken
from processor.changefeed.position import ShardPosition
from processor.reading.lease_position import LeasePosition
from tests.chaos.invariants import (
    Delivery,
    backward_moves,
    exactly_once,
    job_stalls,
    late_deliveries,
    redeliveries,
    rest_problems,
    sequencer_regressions,
)
from tests.chaos.runner import _moves, takeover_times
from tests.chaos.schedule import KINDS, make_schedule
from tests.chaos.zombie import Zombie

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"


def lease(token: str, offset: int, owner: str | None = "h0", epoch: int = 1) -> Lease:
    pos = LeasePosition(SEGMENT, False, ShardPosition("log/00/2026/01/01/0000/00000.avro", offset))
    return Lease(
        LeaseToken(token),
        owner=None if owner is None else HostId(owner),
        epoch=epoch,
        continuation=pos.to_json(),
    )


@given(st.integers(0, 2**32), st.floats(10, 600), st.integers(1, 8))
def test_a_schedule_is_a_function_of_its_seed(seed: int, duration: float, hosts: int) -> None:
    a = make_schedule(seed, duration_s=duration, hosts=hosts, expiry_s=4)
    assert a == make_schedule(seed, duration_s=duration, hosts=hosts, expiry_s=4)
    assert all(0 <= f.at_s < duration and 0 <= f.host < hosts for f in a)
    assert [f.at_s for f in a] == sorted(f.at_s for f in a)
    assert all(f.length_s > 4 for f in a if f.kind == "pause")  # past the expiry
    assert {f.kind for f in a} <= set(KINDS)


def test_a_long_schedule_uses_every_kind_and_unknown_kinds_are_refused() -> None:
    assert {f.kind for f in make_schedule(1, duration_s=1200, hosts=4, expiry_s=4)} == set(KINDS)
    with pytest.raises(ValueError, match="fault kinds"):
        make_schedule(1, duration_s=10, hosts=1, expiry_s=4, kinds=("meteor",))


def test_a_continuation_moving_back_is_caught() -> None:
    fine = [(0.0, lease("00", 10)), (1.0, lease("00", 20)), (1.0, lease("01", 5))]
    assert backward_moves(fine) == []
    (problem,) = backward_moves([*fine, (2.0, lease("00", 15, epoch=2))])
    assert "lease 00 moved back" in problem and "epoch 2" in problem


def test_a_batch_after_a_newer_epoch_started_is_caught() -> None:
    ok = [Delivery(1.0, "h0", "00", 1, 5), Delivery(2.0, "h1", "00", 2, 5)]
    assert late_deliveries(ok) == []
    zombie = Delivery(2.5, "h0", "00", 1, 5)
    (problem,) = late_deliveries([*ok, zombie])
    assert "h0 delivered at epoch 1" in problem and "h1 had started at epoch 2" in problem


def test_missing_duplicate_and_foreign_ids_are_each_caught() -> None:
    assert exactly_once({"a", "b"}, Counter({"a": 1, "b": 1})) == []
    problems = exactly_once({"a", "b", "c"}, Counter({"a": 2, "b": 1, "z": 1}))
    assert [p.split()[1] for p in problems] == ["events", "events", "ids"]
    assert "missing" in problems[0] and "more than once" in problems[1] and "lacks" in problems[2]


def test_at_rest_every_lease_is_owned_and_loads_are_within_one() -> None:
    hosts = {"h0", "h1"}
    assert rest_problems(
        [lease("00", 0, "h0"), lease("01", 0, "h1"), lease("02", 0, None)], hosts
    ) == ["lease 02 has no owner"]
    within_one = [lease(f"{i:02d}", 0, "h0") for i in range(2)] + [lease("03", 0, "h1")]
    assert rest_problems(within_one, hosts) == []
    assert "unbalanced" in rest_problems([*within_one, lease("04", 0, "h0")], hosts)[0]
    assert "not running" in rest_problems([lease("00", 0, "h9")], hosts)[0]


def test_takeover_time_is_until_every_lease_of_the_victim_has_a_newer_epoch() -> None:
    samples = [
        (0.0, lease("00", 0, "h0", 1)),
        (0.0, lease("01", 0, "h0", 1)),
        (3.0, lease("00", 0, "h1", 2)),
        (4.0, lease("01", 0, "h0", 1)),
        (6.0, lease("01", 0, "h1", 2)),
    ]
    assert takeover_times(samples, [(1.0, "h0")]) == [(5.0, 1.0, "h0")]
    assert takeover_times(samples, [(1.0, "h7")]) == []
    # a lease h0 no longer owned when it died does not count
    later = takeover_times([*samples, (3.5, lease("00", 0, "h1", 2))], [(3.7, "h0")])
    assert [round(took, 1) for took, _, _ in later] == [2.3]


def job_row(etag: str, continuation: str, owner: str = "h0") -> Lease:
    return Lease(
        LeaseToken("~job~state"), owner=HostId(owner), continuation=continuation, etag=etag
    )


def test_a_state_job_unwritten_too_long_or_never_moving_after_the_faults_is_caught() -> None:
    healthy = [
        (9.0, job_row("a", "v1")),  # before the faults ended: only its row counts
        (11.0, job_row("b", "v1")),  # a renewal
        (14.0, job_row("c", "v2")),  # a run checkpointed
        (17.0, job_row("d", "v2")),
    ]
    assert job_stalls(healthy, since=10.0, until=20.0, limit_s=8) == []
    # the holder died just before the end of the faults, and nobody took the job for 12 s
    (gap,) = job_stalls(
        [healthy[0], (22.0, job_row("e", "v2", "h1"))], since=10.0, until=24.0, limit_s=8
    )
    assert "unwritten from t=10.0 to t=22.0" in gap
    (tail,) = job_stalls(healthy, since=10.0, until=30.0, limit_s=8)
    assert "unwritten from t=17.0 to t=30.0" in tail
    # the last run, as the hosts stopped, moved it: not stuck, however long that run took
    slow = [(9.0, job_row("a", "v1")), (12.0, job_row("b", "v1")), (19.0, job_row("c", "v1"))]
    assert job_stalls([*slow, (40.0, job_row("d", "v9"))], since=10.0, until=20.0, limit_s=8) == []
    # renewed all along, but no run ever checkpointed: the job fails on every run
    renewed = [(9.0, job_row("a", "v1")), *((10.0 + i, job_row(str(i), "v1")) for i in range(9))]
    (stuck,) = job_stalls(renewed, since=10.0, until=19.0, limit_s=8)
    assert "did not move" in stuck


def test_a_zombie_whose_write_in_flight_was_not_refused_is_caught() -> None:
    zombie = Zombie("h1", ("00", "01"), fenced_before=1)
    earlier = {"event": "spark.fenced", "host": "h1", "error": "... while it was in flight ..."}
    skipped = {"event": "spark.fenced", "host": "h1", "error": "Delta skipped it: ..."}
    other = {"event": "spark.fenced", "host": "h2", "error": "... while it was in flight ..."}

    def logged(*lines: dict[str, object]) -> Any:
        return lambda *_events: list(lines)

    assert zombie.problems(logged(earlier, skipped, other)) != []  # not its own, nor after it
    assert zombie.problems(logged(earlier, skipped, earlier)) == []


def test_redeliveries_count_what_a_newer_owner_delivered_again_per_move() -> None:
    def d(mono: float, host: str, epoch: int, events: int, first: str, last: str) -> Delivery:
        return Delivery(mono, host, "00", epoch, events, first, last)

    history = [
        d(1.0, "h0", 1, 5, "a", "b"),
        d(2.0, "h0", 1, 7, "c", "d"),  # delivered, never committed: h0 then lost the lease
        d(3.0, "h1", 2, 5, "c", "c"),  # again, by h1
        d(3.5, "h1", 2, 2, "d", "d"),  # again
        d(4.0, "h1", 2, 4, "d", "e"),  # across h0's top: not counted (at least)
        d(5.0, "h0", 3, 3, "f", "f"),  # new ground
        d(6.0, "h1", 2, 9, "a", "f"),  # a zombie's batch below h0@3's top
    ]
    moves = redeliveries(history)
    assert [(m.before, m.after, m.events, m.mono) for m in moves] == [
        ("h0@3", "h1@2", 9, 6.0),
        ("h0@1", "h1@2", 7, 3.0),
    ]
    assert redeliveries([d(1.0, "h0", 1, 5, "", "")]) == []  # positions not logged


def test_the_report_counts_leases_taken_again_by_the_host_that_had_them() -> None:
    lines: dict[str, list[dict[str, Any]]] = {
        "lease.acquired": [
            {"host": "h1", "was": None},
            {"host": "h1", "was": "h1"},  # its own, fenced by a store outage
            {"host": "h2", "was": "h1"},
        ],
        "worker.waiting_for_earlier": [{"host": "h1"}],
        "lease.handover_requested": [{"host": "h2"}, {"host": "h3"}],
    }

    def logged(*events: str) -> list[dict[str, Any]]:
        return [line for e in events for line in lines.get(e, [])]

    assert _moves(logged) == (
        "3 acquisitions: 1 taken again by the host that had them (1 waited for its earlier "
        "worker); 2 hand-overs asked for"
    )


def test_a_state_row_moving_to_an_older_sequencer_is_caught_and_other_lengths_are_not() -> None:
    a, b, short = "0001ab", "0001bc", "ff"
    changes = [(3, "c", "x", b), (1, "c", "x", a), (5, "c", "x", short), (7, "c", "y", a)]
    assert sequencer_regressions(changes) == []  # in version order: a, b, then another length
    back = sequencer_regressions([*changes, (9, "c", "x", a), (11, "c", "x", "fff")])
    assert len(back) == 1 and "c/x" in back[0]  # a after b, though another length came between
    assert "0001bc (version 3) to 0001ab (version 9)" in back[0]
