"""SDK continuation tokens: every SDK's variant is read, ours are written the way the SDKs read.

The .NET sample is the one of Azure SDK for .NET PR #14131 (quoted in the research notes); the
Java one differs in `EndTime` only; the Python ones are what `azure-storage-blob-changefeed`
12.0.0b5 writes (an empty `EndTime`, a `null` cursor for a shard not begun).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.admin.processor_token import plan_sdk_position, sdk_feed_position
from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.sdk_token import (
    from_sdk_token,
    is_sdk_token,
    to_sdk_token,
    url_host,
)
from processor.cli.read.read_job import Resume, load_continuation
from processor.reading.lease_position import LeasePosition

HOST = "emilydevtest.blob.core.windows.net"
SEGMENT = "idx/segments/2020/07/30/2300/meta.json"
CHUNK = "log/00/2020/07/30/2300/00000.avro"


def token(end_time: object = "2020-07-31T00:00:00+00:00", **cursor: object) -> str:
    shard = {"CurrentChunkPath": CHUNK, "BlockOffset": 96253, "EventIndex": 0, **cursor}
    return json.dumps(
        {
            "CursorVersion": 1,
            "UrlHost": HOST,
            "EndTime": end_time,
            "CurrentSegmentCursor": {
                "ShardCursors": [shard],
                "CurrentShardPath": "log/00/2020/07/30/2300/",
                "SegmentPath": SEGMENT,
            },
        }
    )


@pytest.mark.parametrize(
    ("end_time", "expected"),
    [
        ("2020-07-31T00:00:00+00:00", datetime(2020, 7, 31, tzinfo=UTC)),  # Python and .NET
        ("2020-07-31T00:00:00Z", datetime(2020, 7, 31, tzinfo=UTC)),  # Java
        ("2020-07-31T01:30:00.1234567+01:30", datetime(2020, 7, 31, 0, 0, 0, 123456, tzinfo=UTC)),
        ("", None),  # Python, no end
        (None, None),  # .NET, no end
    ],
)
def test_every_sdk_end_time_form_is_read(end_time: object, expected: datetime | None) -> None:
    cursor = from_sdk_token(token(end_time), host=HOST)
    assert cursor.end_time == expected
    assert cursor.position == FeedPosition(
        SEGMENT, False, {"log/00/2020/07/30/2300/": ShardPosition(CHUNK, 96253, 0)}
    )


def test_partial_null_and_dict_shard_cursors() -> None:
    doc = json.loads(token())
    doc["CurrentSegmentCursor"]["ShardCursors"].append(None)  # Python: a shard not begun
    assert set(from_sdk_token(json.dumps(doc), host=HOST).position.shards) == {
        "log/00/2020/07/30/2300/"
    }
    doc["CurrentSegmentCursor"]["ShardCursors"] = {
        "log/01/2020/07/30/2300/": {
            "CurrentChunkPath": "$blobchangefeed/log/01/2020/07/30/2300/00002.avro",
            "BlockOffset": 7,
            "EventIndex": 3,
        }
    }
    shards = from_sdk_token(json.dumps(doc), host=HOST).position.shards
    assert shards == {
        "log/01/2020/07/30/2300/": ShardPosition("log/01/2020/07/30/2300/00002.avro", 7, 3)
    }


@pytest.mark.parametrize(
    ("host", "token_host"),
    [
        ("127.0.0.1:10000/devstoreaccount1", "127.0.0.1:10000/devstoreaccount1"),  # Python
        ("127.0.0.1:10000/devstoreaccount1", "127.0.0.1"),  # .NET's Uri.Host
        (HOST, HOST.upper()),
    ],
)
def test_url_host_forms_of_one_account_are_accepted(host: str, token_host: str) -> None:
    doc = json.loads(token())
    doc["UrlHost"] = token_host
    assert from_sdk_token(json.dumps(doc), host=host).position.segment == SEGMENT


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"UrlHost": "other.blob.core.windows.net"}, "belongs to 'other.blob"),
        ({"UrlHost": None, "UrlHash": 12345}, "UrlHash"),
        ({"CursorVersion": 2}, "CursorVersion 2"),
        ({"CurrentSegmentCursor": None}, "no CurrentSegmentCursor"),
        ({"EndTime": "tomorrow"}, "EndTime 'tomorrow'"),
    ],
)
def test_tokens_that_do_not_fit_are_refused(change: dict[str, object], message: str) -> None:
    doc = {**json.loads(token()), **change}
    with pytest.raises(InvalidContinuation, match=message):
        from_sdk_token(json.dumps(doc), host=HOST)


@pytest.mark.parametrize(
    ("cursor", "message"),
    [
        ({"CurrentChunkPath": "log/00/../../secret/00000.avro"}, "not a chunk under"),
        ({"CurrentChunkPath": "other/00/2020/07/30/2300/00000.avro"}, "not a chunk under"),
        ({"CurrentChunkPath": "log/00/2020/07/30/2200/00000.avro"}, "not in segment"),
        ({"BlockOffset": -1}, "whole numbers"),
        ({"EventIndex": True}, "whole numbers"),
    ],
)
def test_bad_shard_cursors_are_named(cursor: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidContinuation, match=message):
        from_sdk_token(token(**cursor), host=HOST)


def test_sdk_and_cfp_tokens_are_told_apart() -> None:
    assert is_sdk_token(token())
    assert not is_sdk_token(FeedPosition(SEGMENT).to_token(account="a"))
    assert not is_sdk_token("not json")


def test_url_host_is_what_the_python_sdk_compares() -> None:
    assert url_host("https://acct.blob.core.windows.net") == "acct.blob.core.windows.net"
    assert (
        url_host("http://127.0.0.1:10000/devstoreaccount1/") == "127.0.0.1:10000/devstoreaccount1"
    )


shard_positions = st.builds(
    lambda shard, n, offset, index: (
        f"log/{shard:02d}/2020/07/30/2300/",
        ShardPosition(f"log/{shard:02d}/2020/07/30/2300/{n:05d}.avro", offset, index),
    ),
    st.integers(0, 99),
    st.integers(0, 99999),
    st.integers(0, 2**40),
    st.integers(0, 10**6),
)


@given(st.lists(shard_positions, min_size=1, max_size=8, unique_by=lambda p: p[0]))
def test_our_sdk_tokens_read_back_as_the_same_position(
    shards: list[tuple[str, ShardPosition]],
) -> None:
    position = FeedPosition(SEGMENT, False, dict(shards))
    end = datetime(2020, 7, 31, 5, tzinfo=UTC)
    text = to_sdk_token(position, host=HOST, end_time=end)
    doc = json.loads(text)
    assert doc["EndTime"] == "2020-07-31T05:00:00+00:00"  # the form Python's strptime reads
    assert doc["CurrentSegmentCursor"]["CurrentShardPath"] == min(dict(shards))
    back = from_sdk_token(text, host=HOST)
    assert back.position == position and back.end_time == end


def test_a_finished_segment_needs_its_shard_ends() -> None:
    done = FeedPosition(SEGMENT, True, {})
    with pytest.raises(ValueError, match="shard ends"):
        to_sdk_token(done, host=HOST)
    ends = {"log/00/2020/07/30/2300/": ShardPosition(CHUNK, 5000, 0)}
    doc = json.loads(to_sdk_token(done, host=HOST, shard_ends=ends))
    assert doc["EndTime"] is None
    assert doc["CurrentSegmentCursor"]["ShardCursors"] == [
        {"CurrentChunkPath": CHUNK, "BlockOffset": 5000, "EventIndex": 0}
    ]
    with pytest.raises(ValueError, match="without a token"):
        to_sdk_token(FeedPosition(), host=HOST)


async def test_the_processor_position_uses_the_lowest_segment() -> None:
    later = "idx/segments/2020/07/31/0000/meta.json"
    mid = ShardPosition("log/01/2020/07/30/2300/00001.avro", 300, 2)
    positions = {
        "00": LeasePosition(SEGMENT, True),  # finished the segment
        "01": LeasePosition(SEGMENT, False, mid),  # inside it
        "02": LeasePosition(later, False, ShardPosition()),  # went past it
        "03": LeasePosition(),  # nothing read: its shard is read from the start
    }
    plan = plan_sdk_position(positions)
    assert plan is not None and plan.segment == SEGMENT
    assert plan.finished == {"00", "02"}

    async def ends(segment: str) -> dict[str, ShardPosition]:
        assert segment == SEGMENT
        return {
            f"log/{n}/2020/07/30/2300/": ShardPosition(f"log/{n}/2020/07/30/2300/00003.avro", 9, 0)
            for n in ("00", "01", "02", "03")
        }

    position = await sdk_feed_position(plan, ends)
    assert position.shards == {
        "log/00/2020/07/30/2300/": ShardPosition("log/00/2020/07/30/2300/00003.avro", 9, 0),
        "log/01/2020/07/30/2300/": mid,
        "log/02/2020/07/30/2300/": ShardPosition("log/02/2020/07/30/2300/00003.avro", 9, 0),
    }
    assert plan_sdk_position({"00": LeasePosition()}) is None


def test_an_empty_saved_token_starts_at_the_beginning(tmp_path: Path) -> None:
    """What `--token-format sdk` saves when nothing was read (an SDK's empty token too)."""
    saved = tmp_path / "token.json"
    saved.write_text("\n")
    assert load_continuation(f"@{saved}", account="a", host=HOST) == Resume()
    sdk = load_continuation(token(), account="a", host=HOST)
    assert sdk.position is not None and sdk.end_time == datetime(2020, 7, 31, tzinfo=UTC)
