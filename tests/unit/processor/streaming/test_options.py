"""The source's options: Spark's names, errors that name the option, secrets kept out of sight."""

from __future__ import annotations

import pytest

from processor.changefeed.position import FeedPosition, ShardPosition
from processor.connection import AZURITE_KEY, DEFAULT_CONNECTION_STRING
from processor.streaming.options import SourceOptionError, SourceOptions

CONN = DEFAULT_CONNECTION_STRING


def parse(streaming: bool = True, **options: str) -> SourceOptions:
    return SourceOptions.parse({"connectionString": CONN, **options}, streaming=streaming)


def test_defaults_read_everything_from_the_beginning_without_control_records() -> None:
    o = parse()
    assert (o.starting, o.max_events, o.max_bytes, o.max_files) == ("earliest", None, None, None)
    assert o.fail_on_data_loss and not o.events.include_control
    assert o.account == "devstoreaccount1"


def test_names_are_case_insensitive_as_spark_hands_them_over() -> None:
    o = SourceOptions.parse(
        {"connectionstring": CONN, "MAXEVENTSPERTRIGGER": "10", "failondataloss": "false"},
        streaming=True,
    )
    assert (o.max_events, o.fail_on_data_loss) == (10, False)


def test_sizes_take_units_and_filters_take_lists() -> None:
    o = parse(
        maxBytesPerTrigger="64m",
        maxFilesPerTrigger="3",
        containers="logs-*, data",
        eventTypes="BlobCreated,BlobDeleted",
        blobPrefix="a/",
        includeControl="true",
    )
    assert (o.max_bytes, o.max_files) == (64 << 20, 3)
    assert o.events.change.containers == ("data", "logs-*")
    assert o.events.change.event_types == {"BlobCreated", "BlobDeleted"}
    assert o.events.include_control


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"maxEventsPerTrigger": "0"}, "maxEventsPerTrigger"),
        ({"maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingOffsets": '{"version": 1}'}, "startingOffsets"),
        ({"endingTimestamp": "2026-01-01T00:00:00Z"}, "endingTimestamp is for batch reads"),
        ({"maxEventPerTrigger": "10"}, "unknown option.*maxeventpertrigger"),
        ({"sas": "sv=1&sig=x", "connectionString": ""}, "sas needs accountUrl"),
        ({"accountUrl": "ftp://x"}, "accountUrl"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(SourceOptionError, match=named):
        parse(**options)


def test_credentials_never_show_in_the_options_repr_or_errors() -> None:
    o = parse()
    assert AZURITE_KEY not in repr(o)
    with pytest.raises(SourceOptionError) as e:
        parse(accountUrl="https://a.blob.core.windows.net")  # with connectionString too
    assert AZURITE_KEY not in str(e.value)


def test_an_account_url_with_a_sas_or_alone_for_entra_id() -> None:
    sas = SourceOptions.parse(
        {"accountUrl": "https://acct.blob.core.windows.net/?sv=2024&sig=abc"}, streaming=True
    )
    assert "SharedAccessSignature=sv=2024&sig=abc" in sas.conn_str
    assert sas.account == "acct"
    entra = SourceOptions.parse(
        {"accountUrl": "https://acct.blob.core.windows.net"}, streaming=True
    )
    assert "SharedAccessSignature" not in entra.conn_str


def test_starting_offsets_take_a_cfp_or_an_sdk_token() -> None:
    chunk = "log/00/2026/01/01/0000/00000.avro"
    segment = "idx/segments/2026/01/01/0000/meta.json"
    position = FeedPosition(
        segment, False, {"log/00/2026/01/01/0000/": ShardPosition(chunk, 500, 2)}
    )
    assert parse(startingOffsets=position.to_token(account="devstoreaccount1")).starting == position
    sdk = (
        '{"CursorVersion":1,"UrlHost":"127.0.0.1:10000/devstoreaccount1","EndTime":null,'
        '"CurrentSegmentCursor":{"ShardCursors":[{"CurrentChunkPath":"$blobchangefeed/'
        + chunk
        + '","BlockOffset":500,"EventIndex":2}],"CurrentShardPath":"","SegmentPath":"'
        + segment
        + '"}}'
    )
    assert parse(startingOffsets=sdk).starting == position
    with pytest.raises(SourceOptionError, match="account"):
        parse(startingOffsets=position.to_token(account="elsewhere"))


def test_without_credentials_the_cli_variable_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set on the driver and the executors, it keeps the key out of the query's options."""
    other = CONN.replace("127.0.0.1", "10.1.2.3")
    monkeypatch.setenv("CFP_CONNECTION_STRING", other)
    assert SourceOptions.parse({}, streaming=True).conn_str == other
