"""The poison copy: the message whole when it fits, with its reason; never over a message's size."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.hints.messages import PoisonReason
from processor.hints.poison import MAX_MESSAGE_CHARS, Delivery, poison_copy, poison_queue_name

CAME = Delivery("hints", "m-1", 3, datetime(2026, 12, 7, tzinfo=UTC))


def test_a_copy_holds_the_body_whole_with_its_reason_and_delivery() -> None:
    doc = orjson.loads(poison_copy("garbage", PoisonReason.UNPARSABLE, "neither", CAME))
    assert doc == {
        "reason": "unparsable",
        "detail": "neither",
        "queue": "hints",
        "message_id": "m-1",
        "dequeue_count": 3,
        "inserted_on": "2026-12-07T00:00:00+00:00",
        "body": "garbage",
    }


@given(st.integers(MAX_MESSAGE_CHARS - 400, MAX_MESSAGE_CHARS), st.text(min_size=1, max_size=8))
def test_a_copy_never_outgrows_a_message_and_a_cut_body_says_what_it_was(
    length: int, piece: str
) -> None:
    text = (piece * (length // len(piece) + 1))[:length]
    copy = poison_copy(text, PoisonReason.TOO_LARGE, "too long", CAME)
    assert len(copy) <= MAX_MESSAGE_CHARS
    doc = orjson.loads(copy)
    if doc["body"] != text:
        assert text.startswith(doc["body"])
        assert doc["body_chars"] == len(text)
        assert doc["body_sha256"] == hashlib.sha256(text.encode()).hexdigest()


def test_escapes_that_lengthen_the_body_are_cut_to_fit_too() -> None:
    text = "\x01" * 20_000  # six characters each in JSON
    assert len(poison_copy(text, PoisonReason.UNPARSABLE, "", CAME)) <= MAX_MESSAGE_CHARS


def test_the_poison_queue_is_named_after_the_queue_and_stays_a_queue_name() -> None:
    assert poison_queue_name("hints") == "hints-poison"
    assert len(poison_queue_name("q" * 63)) <= 63
