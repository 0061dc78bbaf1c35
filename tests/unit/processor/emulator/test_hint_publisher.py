"""The emulator's Event Grid: each fault at its rate, and nothing held back lost on close."""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from processor.emulator.hint_publisher import POISON_BODIES, HintFaults, HintPublisher, HintStyle
from tests.unit.processor.hints.test_messages import feed_record


@dataclass
class Queue:
    sent: list[str] = field(default_factory=list)

    async def send_message(self, text: str, **kwargs: Any) -> None:
        self.sent.append(text)


def _records(n: int) -> list[dict[str, Any]]:
    return [feed_record(id=f"e{i}") for i in range(n)]


def _ids(texts: list[str]) -> list[str]:
    events = [t for t in texts if t not in POISON_BODIES]
    bodies = [t if t.startswith("{") else base64.b64decode(t).decode() for t in events]
    return [orjson.loads(b)["id"] for b in bodies]


async def _publish(faults: HintFaults, n: int = 200, **style: Any) -> tuple[Queue, HintPublisher]:
    queue = Queue()
    publisher = HintPublisher(queue, random.Random(7), faults=faults, style=HintStyle(**style))
    for record in _records(n):
        publisher.publish(record)
    await publisher.aclose()
    return queue, publisher


async def test_without_faults_each_event_is_sent_once_in_order() -> None:
    queue, _ = await _publish(HintFaults(), n=20)
    assert _ids(queue.sent) == [f"e{i}" for i in range(20)]


async def test_the_feeds_own_event_types_have_no_event() -> None:
    queue = Queue()
    publisher = HintPublisher(queue, random.Random(1))
    publisher.publish(feed_record(eventType="BlobPropertiesUpdated"))
    await publisher.aclose()
    assert queue.sent == []


@pytest.mark.parametrize("rate", [0.0, 0.3, 1.0])
async def test_drops_and_duplicates_come_at_their_rates(rate: float) -> None:
    queue, publisher = await _publish(HintFaults(drop=rate))
    assert len(queue.sent) == 200 - publisher.counts["dropped"]
    assert abs(publisher.counts["dropped"] - 200 * rate) <= 30
    queue, publisher = await _publish(HintFaults(duplicate=rate))
    assert len(queue.sent) == 200 + publisher.counts["duplicated"]
    assert abs(publisher.counts["duplicated"] - 200 * rate) <= 30


async def test_poison_comes_beside_the_events_and_held_back_ones_are_sent_on_close() -> None:
    queue, publisher = await _publish(HintFaults(poison=1.0, late=0.5, reorder=0.5), n=50)
    assert sum(t in POISON_BODIES for t in queue.sent) == 50
    assert sorted(_ids(queue.sent)) == sorted(f"e{i}" for i in range(50))
    assert publisher.counts["late"] > 0 and publisher.counts["reordered"] > 0


async def test_cloud_events_as_raw_json() -> None:
    queue, _ = await _publish(HintFaults(), n=2, cloud_events=True, encoded=False)
    assert [orjson.loads(t)["specversion"] for t in queue.sent] == ["1.0", "1.0"]


def test_a_rate_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="--hint-drop"):
        HintFaults(drop=1.5)
