"""Continuation tokens: what a feed position reads back as, and what is refused."""

from __future__ import annotations

import pytest

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition


def test_token_round_trip_and_account_check() -> None:
    pos = FeedPosition(
        "idx/segments/2026/01/01/0000/meta.json",
        False,
        {"log/00/2026/01/01/0000/": ShardPosition("log/00/2026/01/01/0000/00001.avro", 512, 3)},
    )
    token = pos.to_token(account="acct")
    assert FeedPosition.from_token(token, account="acct") == pos
    with pytest.raises(InvalidContinuation, match="acct"):
        FeedPosition.from_token(token, account="other")


@pytest.mark.parametrize(
    "token",
    [
        "not json",
        "[]",
        '{"version": 2, "account": "a"}',
        '{"version": 1, "account": "a", "shards": {"x": {"chunk": 1, "offset": 0, "index": 0}}}',
        '{"version": 1, "account": "a", "shards": {"x": {"chunk": null, "offset": -1, "index": 0}}}',
    ],
)
def test_bad_tokens_are_refused_clearly(token: str) -> None:
    with pytest.raises(InvalidContinuation):
        FeedPosition.from_token(token, account="a")
