"""What `cfp run --hints-queue` and its flags set."""

from __future__ import annotations

import re
from dataclasses import dataclass

QUEUE_NAME = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*$")
"""What Azure Storage takes as a queue's name."""

DEFAULT_VISIBILITY_TIMEOUT_S = 30
DEFAULT_POLL_INTERVAL_S = 1.0
DEFAULT_MAX_DELIVERIES = 5


@dataclass(frozen=True, slots=True)
class HintQueue:
    """The queue a host reads hints from, and how."""

    name: str
    connection_string: str  # the queue's account (the feed's unless told otherwise)
    visibility_timeout_s: int = DEFAULT_VISIBILITY_TIMEOUT_S  # a message hidden from the others
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S  # an empty queue is left this long
    max_deliveries: int = DEFAULT_MAX_DELIVERIES  # a hint not accepted this often is poison

    def __repr__(self) -> str:  # never the connection string: it may hold a key
        return f"HintQueue(name={self.name!r}, visibility_timeout_s={self.visibility_timeout_s})"
