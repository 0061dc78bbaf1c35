"""Stepping a lease over a retention gap (`--on-gap skip`): data at its position was deleted
before it was read. The gap is recorded in the lease (from, to, the error) and reading goes on
from the earliest data still present (`position_after_gap`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from leases import LeaseMove
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import MissingChunkError
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.worker.checkpointer import Checkpointer
from processor.reading.lease_reader import Reader
from processor.reading.retention_gaps import position_after_gap


async def step_over_gap(
    reader: Reader,
    error: MissingChunkError,
    *,
    catalog: FeedCatalog,
    checkpoints: Checkpointer,
    progress: LeaseRecorder,
    wall: Callable[[], datetime],
) -> None:
    """Move the lease `checkpoints` writes, and its reader, past the gap `error` found.
    Checkpointed only once every batch before it is confirmed, so nothing delivered before the
    gap is skipped with it."""
    before = reader.position
    after = await position_after_gap(catalog, checkpoints.held.token, before, error)
    if not before.is_before(after):
        raise error  # nowhere to go: park rather than loop
    await checkpoints.all_confirmed()
    gap = LeaseMove(
        at=wall(),
        before=before.to_json(),
        after=after.to_json(),
        skipped_bytes=None,  # the data is gone: its size is unknown
        reason="retention gap",
        error=str(error),
    )
    checkpoints.log.error("lease.gap", missing=error.path, before=gap.before, after=gap.after)
    progress.gap_stepped()
    checkpoints.ledger.advanced(after)
    await checkpoints.write(after, caught_up=False, gap=gap)
    reader.position = after
    reader.reset()
