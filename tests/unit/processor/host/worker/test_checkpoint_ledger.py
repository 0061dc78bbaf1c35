"""The checkpoint ledger's rules, over any order of batches, dead letters, steps and checkpoints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.position import ShardPosition
from processor.host.worker.checkpoint_ledger import CheckpointLedger
from processor.reading.lease_position import LeasePosition

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"


def at(i: int) -> LeasePosition:
    return LeasePosition(SEGMENT, False, ShardPosition("log/00/2026/01/01/0000/00000.avro", i))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("accept"), st.integers(1, 5)),
        st.tuples(st.just("dead"), st.integers(1, 5)),
        st.tuples(st.just("advance"), st.integers(1, 5)),
        st.tuples(st.just("confirm"), st.just(0)),
        st.tuples(st.just("observer"), st.integers(0, 10)),  # checkpoint(mark) of a batch back
        st.tuples(st.just("observer-latest"), st.just(0)),  # checkpoint() without a mark
    ),
    max_size=60,
)


@given(ops)
def test_checkpoints_never_move_back_skip_nothing_and_count_once(
    steps: list[tuple[str, int]],
) -> None:
    ledger = CheckpointLedger.at(at(0))
    i = 0
    marks: list[LeasePosition] = []  # ends of accepted batches, as ctx.mark() gave them
    accepted_events = dead = 0
    counted_events = counted_dead = 0
    written = [at(0)]
    for op, n in steps:
        target: LeasePosition | None = None
        if op == "accept":
            i += n
            ledger.accepted(at(i), events=n, event_bytes=10 * n, last=None)
            marks.append(at(i))
            accepted_events += n
        elif op == "dead":
            i += n
            ledger.dead_lettered(at(i))
            dead += 1
        elif op == "advance":
            i += n
            ledger.advanced(at(i))
        elif op == "confirm":
            target = ledger.confirmable()
            if target is not None:  # nothing the observer holds unconfirmed lies before it
                assert all(not written[-1].is_before(m) for m in marks)
        elif op == "observer" and marks:
            target = ledger.observer_target(marks[-1 - min(n, len(marks) - 1)])
        elif op == "observer-latest":
            target = ledger.observer_target(None)
            assert target is None or target == at(i)
        if target is not None:
            checkpoint = ledger.prepare(target)
            ledger.written(checkpoint)
            assert not target.is_before(written[-1])  # never back
            written.append(target)
            counted_events += checkpoint.delivered.events
            counted_dead += checkpoint.dead_letters
    # every accepted event is counted once: by a checkpoint, or still pending
    assert counted_events + ledger.pending.events == accepted_events
    assert counted_events <= accepted_events
    # every dead letter is counted once, by the first checkpoint past it
    assert counted_dead + len(ledger.dead_ends) == dead
    assert all(ledger.checkpointed.is_before(d) for d in ledger.dead_ends)
    assert ledger.checkpointed == written[-1]


def test_a_checkpoint_back_is_refused_and_a_foreign_mark_is_a_type_error() -> None:
    ledger = CheckpointLedger.at(at(5))
    with pytest.raises(AssertionError, match="move back"):
        ledger.prepare(at(4))
    with pytest.raises(TypeError, match="not a mark"):
        ledger.observer_target("somewhere")
    assert ledger.observer_target(at(5)) is None  # nothing new


def test_a_step_waits_for_the_observer_to_confirm_its_batches() -> None:
    ledger = CheckpointLedger.at(at(0))
    ledger.accepted(at(3), events=3, event_bytes=30, last=None)
    ledger.advanced(at(4))  # the chunk ended
    assert ledger.confirmable() is None  # the batch up to 3 is not confirmed yet
    ledger.written(ledger.prepare(at(3)))  # the observer confirms it
    assert ledger.confirmable() == at(4)
