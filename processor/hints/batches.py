"""Hints made into the batch observers take: an `ArrowBatch` of feed-shaped records, with the
change log's columns, marked provisional by its origin."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from observers.envelope import HINT_SEGMENT_PREFIX
from observers.events import ArrowBatch
from observers.origin import Origin
from processor.hints.messages import Hint

HINTS_LEASE = "hints"
"""The lease name a batch of hints carries (hints belong to no shard) and its context's."""


def hint_origin(processor: str, received_at: datetime) -> Origin:
    """Where a batch of hints comes from: no shard, no segment; its receive time instead."""
    return Origin(
        HINTS_LEASE, f"{HINT_SEGMENT_PREFIX}{received_at.isoformat()}", processor, received_at
    )


def hint_batch(hints: Sequence[Hint], processor: str, received_at: datetime) -> ArrowBatch:
    """One provisional batch of `hints`, in the order received (which means nothing)."""
    return ArrowBatch.from_records(
        [h.record for h in hints], [""] * len(hints), hint_origin(processor, received_at)
    )
