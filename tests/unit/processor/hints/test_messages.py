"""Reading queue messages into hints: both schemas, both encodings, and every kind of poison."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.emulator.grid_events import grid_event, queue_text
from processor.hints.messages import (
    MAX_HINT_BYTES,
    Hint,
    Ignored,
    Poison,
    PoisonReason,
    read_message,
)

ACCOUNT = "devstoreaccount1"
TOPIC = (
    "/subscriptions/0b1f6471-1bf0-4dda-aec3-111122223333/resourceGroups/rg/providers/"
    f"Microsoft.Storage/storageAccounts/{ACCOUNT}"
)


def feed_record(**changes: Any) -> dict[str, Any]:
    """A change feed record as the emulator writes one."""
    record: dict[str, Any] = {
        "schemaVersion": 4,
        "topic": TOPIC,
        "subject": "/blobServices/default/containers/cfp-emu-0/blobs/dir/a b.txt",
        "eventType": "BlobCreated",
        "eventTime": "2026-12-07T10:00:00.1234560Z",
        "id": "831e1650-001e-001b-66ab-eeb76e000000",
        "data": {
            "api": "PutBlob",
            "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca65760",
            "requestId": "831e1650-001e-001b-66ab-eeb76e069631",
            "etag": "0x8D4BCC2E4835CD0",
            "contentType": "text/plain",
            "contentLength": 524288,
            "blobType": "BlockBlob",
            "url": "",
            "sequencer": "000000000000000000000000000089A4000000000018d6ea",
            "storageDiagnostics": {"bid": "b1", "sid": "s1", "seq": "(1,0,0,0)"},
        },
    }
    record.update(changes)
    return record


def message(record: dict[str, Any], *, cloud: bool = False, encoded: bool = True) -> str:
    event = grid_event(record, cloud_events=cloud)
    assert event is not None
    return queue_text(event, encoded=encoded)


@pytest.mark.parametrize("cloud", [False, True], ids=["event-grid", "cloudevents"])
@pytest.mark.parametrize("encoded", [True, False], ids=["base64", "raw-json"])
def test_a_blob_event_reads_as_the_feed_would_record_it(cloud: bool, encoded: bool) -> None:
    hint = read_message(message(feed_record(), cloud=cloud, encoded=encoded), account=ACCOUNT)
    assert isinstance(hint, Hint)
    assert (hint.container, hint.blob) == ("cfp-emu-0", "dir/a b.txt")
    assert hint.sequencer == "000000000000000000000000000089A4000000000018d6ea"
    assert hint.event_time == datetime(2026, 12, 7, 10, 0, 0, 123456, tzinfo=UTC)
    assert hint.record["eventType"] == "BlobCreated"
    assert hint.record["data"]["etag"] == "0x8D4BCC2E4835CD0"
    assert hint.record["data"]["contentLength"] == 524288
    assert "storageDiagnostics" not in hint.record["data"]
    assert "url" not in hint.record["data"]  # may carry a SAS; the feed's is always empty


def test_a_quoted_etag_is_unquoted_and_async_operations_take_the_feeds_name() -> None:
    event = grid_event(feed_record(eventType="BlobAsyncOperationInitiated"))
    assert event is not None and event["eventType"] == "Microsoft.Storage.AsyncOperationInitiated"
    event["data"]["eTag"] = '"0x8D4BCC2E4835CD0"'
    hint = read_message(queue_text(event), account=ACCOUNT)
    assert isinstance(hint, Hint)
    assert hint.record["eventType"] == "BlobAsyncOperationInitiated"
    assert hint.record["data"]["etag"] == "0x8D4BCC2E4835CD0"


def test_an_array_of_one_event_is_read_and_the_account_name_is_not_case_sensitive() -> None:
    event = grid_event(feed_record(topic=TOPIC.replace(ACCOUNT, ACCOUNT.upper())))
    assert isinstance(read_message(orjson.dumps([event]).decode(), account=ACCOUNT), Hint)


def test_events_the_feed_never_records_are_ignored_not_poison() -> None:
    event = grid_event(feed_record())
    assert event is not None
    event["eventType"] = "Microsoft.Storage.BlobRenamed"
    assert read_message(queue_text(event), account=ACCOUNT) == Ignored(
        "Microsoft.Storage.BlobRenamed"
    )


def _poison(text: str) -> Poison:
    read = read_message(text, account=ACCOUNT)
    assert isinstance(read, Poison), read
    return read


def _grid(**changes: Any) -> dict[str, Any]:
    event = grid_event(feed_record())
    assert event is not None
    event.update(changes)
    return event


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json, not base64!", PoisonReason.UNPARSABLE),
        ("{not json", PoisonReason.UNPARSABLE),
        (base64.b64encode(b"\xff\xfe{").decode(), PoisonReason.UNPARSABLE),
        ("[1, 2]", PoisonReason.WRONG_SCHEMA),
        ('"a string"', PoisonReason.UNPARSABLE),  # neither JSON object nor Base64
        (queue_text({"hello": "world"}), PoisonReason.WRONG_SCHEMA),
        (queue_text(_grid(eventType="Contoso.Items.ItemReceived")), PoisonReason.WRONG_SCHEMA),
        (queue_text(_grid(topic="/subscriptions/x/elsewhere")), PoisonReason.WRONG_SCHEMA),
        (queue_text(_grid(data="nothing")), PoisonReason.WRONG_SCHEMA),
        (queue_text(_grid(eventTime="yesterday")), PoisonReason.WRONG_SCHEMA),
        (
            queue_text(_grid(subject="/blobServices/default/containers/c1")),
            PoisonReason.WRONG_SCHEMA,
        ),
        (
            queue_text(_grid(topic=TOPIC.replace(ACCOUNT, "otheraccount"))),
            PoisonReason.OTHER_ACCOUNT,
        ),
        (
            queue_text(_grid(subject="/blobServices/default/containers/c1/blobs/a/../../x")),
            PoisonReason.ESCAPES_CONTAINER,
        ),
        (
            queue_text(
                _grid(subject="/blobServices/default/containers/$blobchangefeed/blobs/log/x")
            ),
            PoisonReason.ESCAPES_CONTAINER,
        ),
        (
            queue_text(_grid(subject="/blobServices/default/containers/../blobs/x")),
            PoisonReason.ESCAPES_CONTAINER,
        ),
        (
            queue_text(_grid(subject="/blobServices/default/containers/c1/blobs/a\nb")),
            PoisonReason.ESCAPES_CONTAINER,
        ),
        (queue_text(_grid(padding="x" * MAX_HINT_BYTES)), PoisonReason.TOO_LARGE),
        (orjson.dumps(_grid(padding="x" * MAX_HINT_BYTES)).decode(), PoisonReason.TOO_LARGE),
    ],
    ids=lambda v: v if isinstance(v, PoisonReason) else "",
)
def test_bad_messages_are_poison_with_their_reason(text: str, reason: PoisonReason) -> None:
    assert _poison(text).reason is reason


def test_a_sequencer_that_is_not_hex_and_a_cloud_event_of_another_version_are_poison() -> None:
    event = _grid()
    event["data"]["sequencer"] = "../../etc"
    assert _poison(queue_text(event)).reason is PoisonReason.WRONG_SCHEMA
    cloud = grid_event(feed_record(), cloud_events=True)
    assert cloud is not None
    assert _poison(queue_text({**cloud, "specversion": "0.3"})).reason is PoisonReason.WRONG_SCHEMA


def test_a_poison_reason_never_quotes_the_body() -> None:
    event = _grid()
    event["data"]["url"] = "https://a.blob.core.windows.net/c/b?sig=SECRETSIG"
    event["data"]["sequencer"] = "sig=SECRETSIG"
    assert "SECRETSIG" not in _poison(queue_text(event)).detail


_names = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda n: not any(s in (".", "..") for s in n.split("/")) and "\\" not in n)


@given(
    blob=_names,
    sequencer=st.text("0123456789abcdefABCDEF", min_size=16, max_size=64),
    cloud=st.booleans(),
    encoded=st.booleans(),
)
def test_any_valid_event_round_trips(blob: str, sequencer: str, cloud: bool, encoded: bool) -> None:
    record = feed_record(subject=f"/blobServices/default/containers/c-1/blobs/{blob}")
    record["data"]["sequencer"] = sequencer
    hint = read_message(message(record, cloud=cloud, encoded=encoded), account=ACCOUNT)
    assert isinstance(hint, Hint)
    assert (hint.container, hint.blob, hint.sequencer) == ("c-1", blob, sequencer)
    assert hint.record["subject"] == record["subject"]


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()))
def test_no_text_makes_reading_raise(text: str) -> None:
    assert isinstance(read_message(text, account=ACCOUNT), Hint | Ignored | Poison)
