"""The segment barrier, as pure functions of lease positions.

A blob may change shard between segments, so per-blob order holds only if no lease delivers an
event of segment S before every lease has delivered all its events of the segments before S.
A lease has done that when its position is in S or later, or it finished the last segment before
S that its start time lets it read. A partition of the initial scan has done that once it is
done: no feed lease enters its first segment before the whole scan is delivered, so each blob's
backfill event comes before any change of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from processor.changefeed.storage.layout import segment_time
from processor.reading.lease_position import LeasePosition


def readable_segments(segments: Sequence[str], position: LeasePosition) -> list[str]:
    """The segments (sorted paths) a lease reads: those its start and end times let in."""
    window = position.window
    return [s for s in segments if window.segment_may_hold(segment_time(s))]


def has_finished_before(position: LeasePosition, segment: str, segments: Sequence[str]) -> bool:
    """Whether a lease at `position` delivered all it has in segments before `segment`."""
    if position.scan is not None:
        return position.scan.done
    earlier = [s for s in readable_segments(segments, position) if s < segment]
    if not earlier:
        return True
    if position.segment is None:
        return False
    if position.segment > earlier[-1]:
        return True
    return position.segment == earlier[-1] and position.is_segment_done


def may_enter(segment: str, segments: Sequence[str], positions: Iterable[LeasePosition]) -> bool:
    """Whether a lease may start delivering `segment`, given every lease's position."""
    return all(has_finished_before(p, segment, segments) for p in positions)
