"""A host's states and the moves between them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.host.health.lifecycle import MOVES, HostState, Lifecycle, may_move
from tests.unit.fakes import ManualClock


@given(st.lists(st.sampled_from(list(HostState)), max_size=12))
def test_a_final_state_is_never_left_and_refused_moves_change_nothing(
    moves: list[HostState],
) -> None:
    clock = ManualClock()
    life = Lifecycle(clock=clock.monotonic)
    for to in moves:
        before, final = life.state, life.state.is_final
        clock.now += 1
        moved = life.move(to, error="why")
        assert moved == may_move(before, to)
        if final:
            assert life.state is before
        if not moved:
            assert life.state is before


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
