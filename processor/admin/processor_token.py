"""The processor's position as one SDK continuation token, when one exists.

An SDK token names one segment and a cursor per shard of it, while a processor's leases each
stand somewhere in their own shard. The token uses the lowest segment any lease is in: a lease
still inside it gives its shard cursor, a lease that finished it (or went past it) gives the end
of its shard there. A lease past that segment has delivered events the SDK will read again:
the token never skips anything, it may repeat (at-least-once, like every resume).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.storage.layout import chunk_shard_prefix, shard_name
from processor.reading.lease_position import LeasePosition


@dataclass(frozen=True, slots=True)
class SdkPlan:
    """The segment of the token, the cursors known from the leases (by shard prefix), and the
    leases whose shard of that segment is finished (their cursor is the shard's end)."""

    segment: str
    cursors: Mapping[str, ShardPosition]
    finished: frozenset[str]


def plan_sdk_position(positions: Mapping[str, LeasePosition]) -> SdkPlan | None:
    """None when no lease has entered a segment yet (an SDK then starts without a token)."""
    segments = [p.segment for p in positions.values() if p.segment is not None]
    if not segments:
        return None
    lowest = min(segments)
    cursors: dict[str, ShardPosition] = {}
    finished: set[str] = set()
    for token, p in positions.items():
        if p.segment is None:
            continue  # nothing read: the SDK reads this shard from its start
        if p.segment > lowest or p.is_segment_done:
            finished.add(token)
        elif p.shard.chunk is not None:
            cursors[chunk_shard_prefix(p.shard.chunk)] = p.shard
    return SdkPlan(lowest, cursors, frozenset(finished))


async def sdk_feed_position(
    plan: SdkPlan, shard_ends: Callable[[str], Awaitable[dict[str, ShardPosition]]]
) -> FeedPosition:
    """The plan as a feed position, asking storage for the ends of the finished shards."""
    shards = dict(plan.cursors)
    if plan.finished:
        for prefix, end in (await shard_ends(plan.segment)).items():
            if shard_name(prefix) in plan.finished:
                shards[prefix] = end
    return FeedPosition(plan.segment, False, shards)
