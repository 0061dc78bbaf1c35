"""The pure parts of the initial scan: positions, keys, the barrier, records."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leases import Lease, LeaseToken, MemoryLeaseStore
from observers.envelope import ReadMethod
from observers.events import changes_table
from observers.origin import Origin
from observers.protocol import ChangeEvent, EventBatch
from processor.admin.report import describe_position
from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import TIME_SLACK
from processor.host.balancing.lease_creator import feed_start_after_scan
from processor.reading.barrier import may_enter
from processor.reading.lease_position import LeasePosition, ScanPosition, scan_token
from processor.reading.scan_reader import (
    ScanReader,
    backfill_record,
    scan_event_position,
    scan_partition,
    scan_segment,
)
from tests.unit.balancers import FixedFeed, balancer

STARTED = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
SEGMENT = "idx/segments/2026/11/23/1000/meta.json"
names = st.text(alphabet=st.sampled_from("ab./-_ é~z0"), min_size=1, max_size=80)
containers = st.text(alphabet=st.sampled_from("abc-1"), min_size=1, max_size=6)


def test_scan_positions_round_trip_and_refuse_what_we_did_not_write() -> None:
    for scan in (
        ScanPosition(2, 8, STARTED),
        ScanPosition(2, 8, STARTED, ("photos", "2026/a b.jpg")),
        ScanPosition(7, 8, STARTED, ("photos", "z"), done=True),
    ):
        position = LeasePosition(scan=scan, start_time=STARTED - timedelta(hours=1))
        assert LeasePosition.from_json(position.to_json()) == position
    for bad in ({"p": 8, "of": 8, "at": "x"}, {"p": 0, "of": 1, "at": "never"}, [1]):
        doc = LeasePosition(segment=None).to_json()[:-1] + f',"scan":{json.dumps(bad)}}}'
        with pytest.raises(InvalidContinuation, match="lease scan-00: scan position"):
            LeasePosition.from_json(doc, lease="scan-00")


@given(st.lists(st.tuples(containers, names), min_size=2, max_size=20, unique=True))
def test_scan_positions_and_keys_sort_like_the_listing(blobs: list[tuple[str, str]]) -> None:
    listing = sorted(blobs)  # containers by name, then blobs by name
    positions = [LeasePosition(scan=ScanPosition(0, 1, STARTED, after)) for after in listing]
    done = LeasePosition(scan=ScanPosition(0, 1, STARTED, listing[-1], done=True))
    keys = [p.order_key() for p in [LeasePosition(scan=ScanPosition(0, 1, STARTED)), *positions]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert positions[-1].is_before(done)
    event_positions = [scan_event_position(c, b) for c, b in listing]
    assert event_positions == sorted(event_positions)


def test_feed_leases_wait_for_every_scan_partition() -> None:
    segments = [SEGMENT]
    feed = LeasePosition(start_time=STARTED - timedelta(hours=1))
    running = LeasePosition(scan=ScanPosition(0, 2, STARTED, ("c", "b")))
    finished = LeasePosition(scan=ScanPosition(1, 2, STARTED, done=True))
    assert not may_enter(SEGMENT, segments, [feed, running, finished])
    done = LeasePosition(scan=ScanPosition(0, 2, STARTED, ("c", "b"), done=True))
    assert may_enter(SEGMENT, segments, [feed, done, finished])
    inside = LeasePosition(SEGMENT, False, ShardPosition("log/00/2026/11/23/1000/00000.avro"))
    assert may_enter(SEGMENT, segments, [inside, done, finished])


def test_the_feed_starts_an_hour_before_the_earliest_scan_partition() -> None:
    def lease(partition: int, started: datetime) -> Lease:
        scan = ScanPosition(partition, 2, started)
        return Lease(
            LeaseToken(scan_token(partition)), continuation=LeasePosition(scan=scan).to_json()
        )

    later = STARTED + timedelta(seconds=3)  # another host made this partition a moment later
    start = feed_start_after_scan([lease(0, later), lease(1, STARTED)])
    assert start is not None
    assert LeasePosition.from_json(start).start_time == STARTED - timedelta(hours=1)
    assert feed_start_after_scan([]) is None


def test_a_listed_blob_becomes_a_backfill_event() -> None:
    blob = SimpleNamespace(
        name="dir/cat.jpg",
        etag='"0x8DE2A6F2E5C1A11"',
        size=48211,
        content_settings=SimpleNamespace(content_type="image/jpeg"),
        blob_type=SimpleNamespace(value="BlockBlob"),
        blob_tier="Hot",
        version_id=None,
        snapshot=None,
        tags={"k": "v"},
        last_modified=STARTED - timedelta(days=3),
    )
    raw = backfill_record("photos", blob)  # type: ignore[arg-type]
    assert raw == backfill_record("photos", blob)  # type: ignore[arg-type]  # same id each time
    scan = ScanPosition(0, 1, STARTED)
    origin = Origin("scan-00", scan_segment(scan), "p")
    event = ChangeEvent.from_raw(raw, origin=origin)
    assert (event.container, event.blob, event.read_method) == (
        "photos",
        "dir/cat.jpg",
        ReadMethod.BACKFILL,
    )
    assert event.properties()["etag"] == "0x8DE2A6F2E5C1A11" and event.sequencer == ""
    assert event.event_time == STARTED - timedelta(days=3)
    row = changes_table(
        EventBatch.from_records([raw], [scan_event_position("photos", "dir/cat.jpg")], origin)
    ).to_pylist()[0]
    assert (row["read_method"], row["segment"], row["tags"]) == (
        "backfill",
        STARTED,
        [("k", "v")],
    )
    assert 0 <= scan_partition("photos", "dir/cat.jpg", 8) < 8


def test_status_names_the_scan_and_where_it_stands() -> None:
    scan = ScanPosition(1, 4, STARTED, ("photos", "dir/cat.jpg"))
    assert describe_position(LeasePosition(scan=scan)) == ("scan", "after photos/dir/cat.jpg")
    done = ScanPosition(1, 4, STARTED, done=True)
    assert describe_position(LeasePosition(scan=done)) == ("scan", "done")


class Listing:
    """An account's listing in memory, two names a page (the reader's view of storage)."""

    def __init__(self, blobs: dict[str, list[str]]) -> None:
        self.blobs = blobs
        self.pages = 0

    async def list_containers(self) -> list[str]:
        return sorted(self.blobs)

    async def list_blob_page(
        self, container: str, marker: str | None
    ) -> tuple[list[SimpleNamespace], str | None]:
        self.pages += 1
        names = sorted(self.blobs.get(container, []))
        start = int(marker or 0)
        page = [_props(n) for n in names[start : start + 2]]
        return page, str(start + 2) if start + 2 < len(names) else None


def _props(name: str) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, etag=f'"{name}"', size=1, content_settings=None, blob_type=None,
        blob_tier=None, version_id=None, snapshot=None, tags=None, last_modified=STARTED,
    )  # fmt: skip


async def _scan(reader: ScanReader) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []
    while True:
        step = await reader.read(may_enter=lambda *_: True)
        if step.batch is None:
            assert step.position.scan is not None and step.position.scan.done
            return got
        got += [
            tuple(r["subject"].split("/containers/")[1].split("/blobs/", 1))  # type: ignore[misc]
            for r in step.batch.arrow(Origin("scan-00", step.batch.segment)).dicts()
        ]


async def test_a_scan_partition_delivers_its_share_once_and_resumes_after_its_last_blob() -> None:
    listing = Listing({"a": [f"x{i}" for i in range(9)], "b": [f"y/{i}" for i in range(7)]})
    everything = [(c, n) for c in sorted(listing.blobs) for n in sorted(listing.blobs[c])]
    shares = []
    for partition in range(3):
        start = LeasePosition(scan=ScanPosition(partition, 3, STARTED))
        reader = ScanReader(listing, start, batch_events=2)  # type: ignore[arg-type]
        got = await _scan(reader)
        assert got == [b for b in everything if scan_partition(*b, 3) == partition]
        shares += got
    assert sorted(shares) == everything  # every blob in exactly one partition

    mine = [b for b in everything if scan_partition(*b, 3) == 0]
    resumed = LeasePosition(scan=ScanPosition(0, 3, STARTED, mine[1]))
    again = await _scan(ScanReader(listing, resumed, batch_events=2))  # type: ignore[arg-type]
    assert again == mine[2:]


async def test_containers_without_blobs_are_passed_over() -> None:
    listing = Listing({"a": ["1", "2"], "empty": [], "c": ["3"]})
    reader = ScanReader(listing, LeasePosition(scan=ScanPosition(0, 1, STARTED)))  # type: ignore[arg-type]
    assert await _scan(reader) == [("a", "1"), ("a", "2"), ("c", "3")]


async def test_a_host_that_lost_the_race_to_make_the_scan_still_waits_for_it() -> None:
    """h2 lists an empty table, then h1 makes the scan and the feed's lease before h2 tries:
    h2's barrier must still know every scan partition, or its feed worker starts at once."""
    store = MemoryLeaseStore()
    now = datetime.now(UTC)
    segment = f"idx/segments/{now:%Y/%m/%d/%H}00/meta.json"
    feed = FixedFeed([segment], {"00"})
    h1, _ = balancer(store, "h1", feed, scan_partitions=3)

    class ListsBeforeH1:
        """The store as h2 sees it: its first listing is answered just before h1's tick."""

        raced = False

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def list_leases(self) -> list[Lease]:
            rows = await store.list_leases()
            if not self.raced:
                self.raced = True
                await h1.tick()
            return rows

    h2, _ = balancer(ListsBeforeH1(), "h2", feed, scan_partitions=3)  # type: ignore[arg-type]
    await h2.tick()
    assert {x.token for x in await store.list_leases()} == {"00", *map(scan_token, range(3))}
    assert not h2.book.may_enter(segment, [segment])
    assert h2.creator.initial_continuation == h1.creator.initial_continuation is not None


async def test_partitions_a_dead_host_did_not_make_are_made_by_the_next() -> None:
    """h1 died after making 2 of its 4 partitions: the next host makes the other 2 (with the
    count h1 chose, not its own), so no part of the account goes unscanned."""
    store = MemoryLeaseStore()
    for partition in (0, 2):
        position = LeasePosition(scan=ScanPosition(partition, 4, STARTED))
        assert await store.create_if_absent(LeaseToken(scan_token(partition)), position.to_json())
    h2, _ = balancer(store, "h2", FixedFeed(), scan_partitions=8)
    await h2.tick()
    rows = {x.token: LeasePosition.from_json(x.continuation) for x in await store.list_leases()}
    assert sorted(rows) == [scan_token(p) for p in range(4)]
    assert all(p.scan is not None and p.scan.partitions == 4 for p in rows.values())
    start = h2.creator.initial_continuation
    assert start is not None and LeasePosition.from_json(start).start_time == STARTED - TIME_SLACK
