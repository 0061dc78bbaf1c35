"""A host's states and the moves between them."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from processor.host.health.lifecycle import MOVES, HostState, Lifecycle, may_move
from tests.unit.fakes import ManualClock


def test_every_state_but_the_final_ones_has_a_way_out() -> None:
    assert {s for s, out in MOVES.items() if not out} == {
        HostState.STOPPED,
        HostState.FAILED_PERMANENTLY,
    }
    assert all(may_move(s, HostState.FAILED_PERMANENTLY) for s in MOVES if not s.is_final)


def test_listeners_hear_each_change_once_and_the_time_in_state_restarts() -> None:
    clock, heard = ManualClock(), []
    life = Lifecycle(clock=clock.monotonic, listeners=[heard.append])
    life.move(HostState.STARTING)
    clock.now += 5
    life.move(HostState.STARTING)  # staying: no change to hear
    assert life.seconds_in_state() == 5
    life.move(HostState.RUNNING)
    assert heard == [HostState.STARTING, HostState.RUNNING] and life.seconds_in_state() == 0
    assert life.move(HostState.NOT_STARTED) is False and life.state is HostState.RUNNING


@given(st.lists(st.sampled_from(list(HostState)), max_size=30))
def test_a_lifecycle_only_moves_along_the_table(targets: list[HostState]) -> None:
    life = Lifecycle(clock=lambda: 0.0)
    seen = [life.state]
    for to in targets:
        before = life.state
        moved = life.move(to)
        assert moved == may_move(before, to)
        assert life.state == (to if moved else before)
        if life.state != seen[-1]:
            seen.append(life.state)
    for a, b in itertools.pairwise(seen):
        assert b in MOVES[a]
    assert all(not MOVES[s] for s in HostState if s.is_final)


def test_a_late_failure_does_not_undo_draining() -> None:
    life = Lifecycle(clock=lambda: 0.0)
    for s in (HostState.STARTING, HostState.RUNNING, HostState.DRAINING):
        assert life.move(s)
    assert not life.move(HostState.FAILED, error="store silent")
    assert not life.move(HostState.RUNNING)
    assert life.state is HostState.DRAINING and life.error == ""
