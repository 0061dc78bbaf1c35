"""What an observer may declare beyond the contract, and the defaults when it does not."""

from __future__ import annotations

from observers import (
    checkpoints_after_each_batch,
    needs_segment_order,
    singleton_jobs,
)


def test_what_observers_declare_beyond_the_contract_and_the_defaults() -> None:
    class Plain:
        def process_changes(self, ctx: object, events: object) -> None: ...

    class Buffering(Plain):
        auto_checkpoint = False

    class OrderedFactory:
        needs_segment_order = False
        jobs = ("a job",)

    assert checkpoints_after_each_batch(Plain()) and not checkpoints_after_each_batch(Buffering())
    assert needs_segment_order(Plain) and not needs_segment_order(OrderedFactory())
    assert singleton_jobs(Plain) == () and singleton_jobs(OrderedFactory()) == ("a job",)
