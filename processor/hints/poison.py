"""The copy of a bad message that goes to `<queue>-poison`: the message as it came, and why.

The body is kept whole when it fits a queue message; a body too large to fit beside its reason
is cut, and the copy says how long it was and its SHA-256, so an operator can tell one from
another. The reason never quotes the body (`Poison.detail` names fields, not values)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import orjson

from processor.hints.messages import PoisonReason

MAX_MESSAGE_CHARS = 64 * 1024
"""What one queue message holds (Azure and Azurite alike)."""


def poison_queue_name(queue: str) -> str:
    """`<queue>-poison`, Azure Functions' convention (a queue name has at most 63 characters)."""
    return f"{queue[:56]}-poison"


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the queue said of a message."""

    queue: str
    message_id: str
    dequeue_count: int
    inserted_on: datetime | None


def poison_copy(text: str, reason: PoisonReason, detail: str, came: Delivery) -> str:
    """The poison queue's message for `text`: JSON, at most `MAX_MESSAGE_CHARS`."""
    head = {
        "reason": reason.value,
        "detail": detail,
        "queue": came.queue,
        "message_id": came.message_id,
        "dequeue_count": came.dequeue_count,
        "inserted_on": came.inserted_on.isoformat() if came.inserted_on else None,
    }
    whole = orjson.dumps({**head, "body": text}).decode()
    if len(whole) <= MAX_MESSAGE_CHARS:
        return whole
    digest = hashlib.sha256(text.encode()).hexdigest()
    marked = {**head, "body_chars": len(text), "body_sha256": digest, "body": ""}
    room = MAX_MESSAGE_CHARS - len(orjson.dumps(marked)) - 64  # escapes may lengthen the cut
    cut = text[: max(room, 0)]
    while len(copy := orjson.dumps({**marked, "body": cut}).decode()) > MAX_MESSAGE_CHARS:
        cut = cut[: len(cut) * 9 // 10]
    return copy
