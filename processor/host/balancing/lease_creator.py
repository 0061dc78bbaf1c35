"""Lease rows: those of an initial scan, and one for every shard that appears in the feed.

Every row is made insert-if-absent, so hosts that start together agree: whoever is first wins and
every other host's insert is refused. Run at each balancing tick, before the balance is planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog

from leases import Lease, LeaseTable, LeaseToken, is_reserved
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedCorrupt, FeedError
from processor.changefeed.selection import TIME_SLACK
from processor.clock import Clock
from processor.reading.lease_position import LeasePosition, ScanPosition, is_scan_token, scan_token

log = structlog.get_logger("cfp.balancer")


@dataclass(slots=True)
class LeaseCreator:
    store: LeaseTable
    catalog: FeedCatalog
    clock: Clock
    initial_continuation: str | None = None  # of a new feed lease (--start/--end-time, the scan)
    scan_partitions: int = 0  # --initial-scan: partitions of a scan made with the first leases
    created: int = 0  # rows this host made
    _logged_feed_problems: set[str] = field(default_factory=set)  # logged once each
    _scan_skipped_logged: bool = False

    async def create(self, leases: list[Lease]) -> list[Lease]:
        """The rows `leases` (this tick's listing) lacks: the scan's first, then the shards'."""
        made = await self._create_scan(leases)
        return made + await self._create_missing({x.token for x in [*leases, *made]})

    async def _create_scan(self, leases: list[Lease]) -> list[Lease]:
        """With --initial-scan: the scan's leases, made before any other lease of a processor
        that has none (insert-if-absent, like every lease), and any a host died before making;
        returns the scan rows `leases` lacked. The feed's leases then start at the scan's start
        minus the segment slack (`feed_start_after_scan`)."""
        if not self.scan_partitions:
            return []
        scans = [x for x in leases if is_scan_token(x.token)]
        if not scans and leases:
            if not self._scan_skipped_logged:
                log.warning("initial_scan.skipped", reason="the processor already has leases")
                self._scan_skipped_logged = True
            return []
        missing, of = missing_scan_partitions(scans, self.scan_partitions)
        added: list[Lease] = []
        if missing:
            added = await self._insert_scan(missing, of=of)
            if len(added) < len(missing):
                # another host made some since our listing: every partition must reach the
                # barrier's book now, or this tick's feed workers would not wait for the scan
                known = {x.token for x in scans}
                listed = await self.store.list_leases()
                added = [x for x in listed if is_scan_token(x.token) and x.token not in known]
        self.initial_continuation = feed_start_after_scan(
            scans + added, end_time=LeasePosition.from_json(self.initial_continuation).end_time
        )
        return added

    async def _insert_scan(self, partitions: list[int], *, of: int) -> list[Lease]:
        started = self.clock.wall()
        created: list[Lease] = []
        for partition in partitions:
            position = LeasePosition(scan=ScanPosition(partition, of, started))
            row = await self.store.create_if_absent(
                LeaseToken(scan_token(partition)), position.to_json()
            )
            if row is not None:
                self.created += 1
                created.append(row)
        if created:
            log.info(
                "initial_scan.created",
                partitions=[x.token for x in created],
                of=of,
                started=started.isoformat(),
            )
        return created

    async def _create_missing(self, existing: set[str]) -> list[Lease]:
        """Rows for shards that appeared in the feed. A feed whose segment list cannot be
        read (a malformed `segments.json`) creates none, but balancing goes on: the leases that
        exist still move between hosts, and each parks when it needs the list itself."""
        try:
            segments = await self.catalog.segments()
        except FeedCorrupt as e:
            if str(e) not in self._logged_feed_problems:
                log.error("feed.unreadable", error=str(e))
            self._logged_feed_problems = {str(e)}
            return []
        bad: dict[str, FeedCorrupt] = {}
        names = await self.catalog.shard_names(segments, bad=bad)
        for path, error in bad.items():
            if path not in self._logged_feed_problems:
                log.error("manifest.unreadable", manifest=path, error=str(error))
        unleasable = {n for n in names if is_reserved(n) or is_scan_token(n)}
        for name in sorted(unleasable):
            if name not in self._logged_feed_problems:
                log.error("shard.unleasable", shard=name, error="its name is a reserved row key")
        self._logged_feed_problems = set(bad) | unleasable
        created: list[Lease] = []
        for name in sorted(names - existing - unleasable):
            row = await self.store.create_if_absent(LeaseToken(name), self.initial_continuation)
            if row is None:
                row = await self.store.get(LeaseToken(name))
            else:
                self.created += 1
                log.info("lease.created", lease=name)
            if row is not None:
                created.append(row)
        return created


def _scan_positions(scans: list[Lease]) -> list[ScanPosition]:
    positions = []
    for lease in scans:
        try:
            scan = LeasePosition.from_json(lease.continuation, lease=lease.token).scan
        except FeedError:
            continue
        if scan is not None:
            positions.append(scan)
    return positions


def missing_scan_partitions(scans: list[Lease], wanted: int) -> tuple[list[int], int]:
    """The partitions of the initial scan that have no lease row, and how many it has: all
    `wanted` of a scan not begun, or those a host died before making (lease rows are never
    deleted, and the rows made say how many partitions the scan has)."""
    made = _scan_positions(scans)
    of = made[0].partitions if made else wanted
    return sorted(set(range(of)) - {x.partition for x in made}), of


def feed_start_after_scan(scans: list[Lease], *, end_time: datetime | None = None) -> str | None:
    """The continuation of a feed lease made alongside a scan: from the scan's start minus the
    segment slack, so that every change a listing may have missed is delivered (a change older
    than that is in the listing)."""
    started = [x.started_at for x in _scan_positions(scans)]
    if not started:
        return None
    return LeasePosition(start_time=min(started) - TIME_SLACK, end_time=end_time).to_json()
