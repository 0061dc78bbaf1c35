"""Stepping from chunk to chunk: a missing chunk number is data gone, never stepped over."""

from __future__ import annotations

import pytest

from processor.changefeed.shard_reader import first_missing_chunk

SHARD = "log/00/2026/01/01/0000/"


def chunk(n: int) -> str:
    return f"{SHARD}{n:05d}.avro"


@pytest.mark.parametrize(
    ("before", "after", "missing"),
    [
        (None, chunk(0), None),
        (None, chunk(2), 0),
        (chunk(0), chunk(1), None),
        (chunk(3), chunk(5), 4),
        (chunk(3), "not/a/chunk", None),
        ("not/a/chunk", chunk(7), None),
    ],
)
def test_the_first_missing_chunk_is_named_and_unnumbered_names_are_not_judged(
    before: str | None, after: str, missing: int | None
) -> None:
    assert first_missing_chunk(before, after) == missing
