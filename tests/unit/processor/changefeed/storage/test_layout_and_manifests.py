"""Paths from manifests, manifest parsing, and connection strings."""

from __future__ import annotations

import pytest

from processor import connection
from processor.changefeed.errors import ManifestError, UnsafePathError
from processor.changefeed.storage.layout import checked_shard_prefix, segment_time, shard_name
from processor.changefeed.storage.manifests import (
    SegmentStatus,
    parse_feed_manifest,
    parse_segment_manifest,
)
from tests.fixtures import RECORDED

M = "idx/segments/2026/01/01/0000/meta.json"


def test_good_prefixes_are_returned_relative_to_the_container() -> None:
    assert (
        checked_shard_prefix("$blobchangefeed/log/00/2022/11/28/2100/", manifest=M)
        == "log/00/2022/11/28/2100/"
    )
    assert shard_name("log/07/2022/11/28/2100/") == "07"


@pytest.mark.parametrize(
    "entry",
    [
        "$blobchangefeed/log/../meta/",
        "$blobchangefeed/log/00/../../secret/",
        "$blobchangefeed/idx/segments/",
        "other/log/00/2022/",
        "/$blobchangefeed/log/00/",
        "$blobchangefeed/log/00/2022",
        "$blobchangefeed/log//00/",
        "$blobchangefeed/log/00\\..\\x/",
        "$blobchangefeed/log/./00/",
        "$blobchangefeed/log/00/\n/",
        "https://evil.example/log/00/",
    ],
)
def test_paths_outside_the_log_are_refused(entry: str) -> None:
    with pytest.raises(UnsafePathError) as e:
        checked_shard_prefix(entry, manifest=M)
    assert e.value.path == M and e.value.entry == entry


def test_recorded_manifests_parse() -> None:
    root = RECORDED / "python-recording-2022/idx/segments/2022/11/28"
    done = parse_segment_manifest((root / "2100/meta.json").read_bytes(), path="a")
    live = parse_segment_manifest((root / "2200/meta.json").read_bytes(), path="b")
    assert done.status is SegmentStatus.FINALIZED and live.status is SegmentStatus.PUBLISHING
    assert len(done.shard_prefixes) == 3 and done.schema_version == 5
    net = parse_segment_manifest(
        (RECORDED / "dotnet-resources/SegmentManifest.json").read_bytes(), path="c"
    )
    assert len(net.shard_prefixes) == 5  # numShards says 1: iterate chunkFilePaths
    feed = parse_feed_manifest(
        (RECORDED / "dotnet-resources/ChangeFeedManifest.json").read_bytes(), path="d"
    )
    assert feed.last_consumable is not None


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "invalid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"status": "Finalized", "chunkFilePaths": []}', "missing field 'begin'"),
        (
            b'{"begin": "2026-01-01T00:00:00Z", "status": "Done", "chunkFilePaths": []}',
            "unknown status",
        ),
        (b'{"begin": "yesterday", "status": "Finalized", "chunkFilePaths": []}', "not an ISO time"),
        (
            b'{"begin": "2026-01-01T00:00:00Z", "status": "Finalized", "chunkFilePaths": "x"}',
            "not a list",
        ),
    ],
)
def test_bad_manifests_name_their_path(body: bytes, problem: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_segment_manifest(body, path=M)
    assert e.value.path == M and problem in str(e.value)


def test_segment_paths_carry_minutes() -> None:
    assert segment_time("idx/segments/2019/02/22/1810/meta.json").minute == 10


def test_loopback_check_and_safe_description() -> None:
    assert connection.is_loopback_endpoint("http://127.0.0.1:10000/devstoreaccount1")
    assert connection.is_loopback_endpoint("http://localhost:10000/x")
    assert connection.is_loopback_endpoint("http://[::1]:10000/x")
    assert not connection.is_loopback_endpoint("https://acct.blob.core.windows.net")
    assert not connection.is_loopback_endpoint("http://10.0.0.5:10000/x")
    info = connection.parse(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net"
    )
    assert info.blob_endpoint == "https://acct.blob.core.windows.net"
    assert "c2VjcmV0" not in info.describe()
