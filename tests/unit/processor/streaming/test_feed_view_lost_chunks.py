"""Chunks that retention removed under a stream: stepped over once and counted, or the query
fails naming them. (The whole path, segment gone, runs against Azurite in the integration tests.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import TimeRange
from processor.changefeed.storage.feed_storage import BlobInfo
from processor.streaming.feed_view import DataLoss, FeedView, Listing

PREFIX = "log/00/2026/01/01/0000/"


def view(*, fail: bool) -> FeedView:
    storage: Any = None  # the decisions under test make no request
    return FeedView(
        storage,
        account="acct",
        window=TimeRange(),
        fail_on_data_loss=fail,
        now=lambda: datetime.now(UTC),
    )


def listing(*numbers: int, size: int = 1000) -> Listing:
    return Listing(tuple(BlobInfo(f"{PREFIX}{n:05d}.avro", size) for n in numbers), True)


def at(n: int, offset: int) -> ShardPosition:
    return ShardPosition(f"{PREFIX}{n:05d}.avro", offset, 0)


@pytest.mark.parametrize(
    ("start", "chunks", "moved_to", "lost"),
    [
        (at(0, 500), (0, 1), at(0, 500), 0),  # reading inside a chunk that is there
        (at(0, 1000), (0, 1), at(0, 1000), 0),  # at a chunk's end, the next one follows
        (at(0, 1000), (0, 2), at(2, 0), 1),  # 00001 gone right ahead
        (at(0, 500), (2, 3), at(2, 0), 1),  # the chunk being read is gone
        (ShardPosition(), (2, 3), at(2, 0), 1),  # the shard's first chunks are gone
        (ShardPosition(), (0, 1), ShardPosition(), 0),
        (at(1, 500), (), ShardPosition(), 1),  # nothing left of the shard
        (at(0, 500), (0, 2), at(0, 500), 0),  # a gap further on: for a later micro-batch
    ],
)
def test_a_gap_right_ahead_is_stepped_over_and_counted_once(
    start: ShardPosition, chunks: tuple[int, ...], moved_to: ShardPosition, lost: int
) -> None:
    assert view(fail=False)._past_gaps(PREFIX, start, listing(*chunks)) == (moved_to, lost)


def test_with_fail_on_data_loss_the_gap_is_named() -> None:
    with pytest.raises(DataLoss, match=f"chunks of {PREFIX} are gone before {PREFIX}00002.avro"):
        view(fail=True)._past_gaps(PREFIX, at(0, 1000), listing(0, 2))
