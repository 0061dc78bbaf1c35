"""Hints as the batch an observer takes: the change log's columns, provisional, read as hints."""

from __future__ import annotations

from datetime import UTC, datetime

from observers import CHANGES_SCHEMA, EventBatch, ReadMethod
from observers.formats import Format, format_lines
from processor.emulator.grid_events import grid_event, queue_text
from processor.hints.batches import HINTS_LEASE, hint_batch
from processor.hints.messages import Hint, read_message
from tests.unit.processor.hints.test_messages import ACCOUNT, feed_record

AT = datetime(2026, 12, 7, 10, 0, 5, tzinfo=UTC)


def _hints() -> list[Hint]:
    records = [
        feed_record(),
        feed_record(eventType="BlobDeleted", id="d-1"),
    ]
    hints = []
    for record in records:
        event = grid_event(record)
        assert event is not None
        hint = read_message(queue_text(event), account=ACCOUNT)
        assert isinstance(hint, Hint)
        hints.append(hint)
    return hints


def test_a_batch_of_hints_has_the_change_logs_columns_and_is_read_as_hints() -> None:
    batch = hint_batch(_hints(), "proc", AT)
    assert batch.provisional and len(batch) == 2
    rows = batch.changes()
    assert rows.schema == CHANGES_SCHEMA
    assert rows["read_method"].to_pylist() == [ReadMethod.HINT.value] * 2
    assert rows["op"].to_pylist() == ["upsert", "delete"]
    assert rows["shard"].to_pylist() == [HINTS_LEASE] * 2
    assert rows["position"].to_pylist() == ["", ""]
    assert rows["segment"].to_pylist() == [AT, AT]  # no segment: when it was received
    assert rows["stream_name"].to_pylist() == ["proc", "proc"]
    assert rows["etag"].to_pylist()[0] == "0x8D4BCC2E4835CD0"
    events = EventBatch(batch)
    assert [e.read_method for e in events] == [ReadMethod.HINT] * 2
    assert events[0].envelope().read_method is ReadMethod.HINT


def test_every_format_says_a_hint_is_provisional() -> None:
    batch = hint_batch(_hints(), "proc", AT)
    for fmt in (Format.ENVELOPE, Format.DEBEZIUM, Format.YDB):
        assert format_lines(batch, fmt).count(b'"provisional":true') == 2
