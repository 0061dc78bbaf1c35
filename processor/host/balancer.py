"""The balancing loop: list, observe, plan, write, log. The decision itself is `plan_takes`.

Driven by the host every `acquire_every_s` with +/-20 % jitter (fixed delay), and sooner when a
lease this host watches would expire before the next tick (`ExpiryTracker.next_expiry`). Each
tick also creates lease rows for shards that appeared in the feed (insert-if-absent: whoever is
first wins, every other host's insert is refused), and feeds the segment barrier with fresh
positions.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from leases import (
    BalanceLimits,
    ExpiryTracker,
    HostId,
    Lease,
    LeaseError,
    LeaseStore,
    LeaseStoreMisconfigured,
    LeaseToken,
    LeaseView,
    plan_takes,
)
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedCorrupt, FeedError
from processor.changefeed.selection import TIME_SLACK
from processor.clock import Clock
from processor.host.progress import HostProgress
from processor.host.supervisor import WorkerSupervisor
from processor.host.timings import JITTER_FRACTION, Timings
from processor.reading.barrier_book import PositionBook
from processor.reading.lease_position import LeasePosition, ScanPosition, is_scan_token, scan_token
from processor.waiting import running_event, wait_any

log = structlog.get_logger("cfp.balancer")


@dataclass(slots=True)
class BalancerStats:
    ticks: int = 0
    acquired: int = 0
    requested: int = 0
    forced: int = 0
    created: int = 0
    last_hosts: int = 0
    last_target: int = 0


@dataclass(slots=True)
class Balancer:
    store: LeaseStore
    catalog: FeedCatalog
    supervisor: WorkerSupervisor
    book: PositionBook
    me: HostId
    timings: Timings
    clock: Clock
    initial_continuation: str | None = None
    scan_partitions: int = 0  # --initial-scan: partitions of a scan made with the first leases
    limits: BalanceLimits = field(default_factory=BalanceLimits)
    rng: random.Random = field(default_factory=random.Random)
    on_caught_up: Callable[[], None] | None = None
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)  # a lease just caught up
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # cleared while the processor is paused (`cfp pause`): workers hold their leases idle
    running: asyncio.Event = field(default_factory=running_event)
    paused: bool = False  # as of the last tick
    parked: list[Lease] = field(default_factory=list)  # at the last tick
    stats: BalancerStats = field(default_factory=BalancerStats)
    progress: HostProgress = field(default_factory=HostProgress)
    # after every tick: None when the lease store answered, else its error (the host's health)
    on_tick: Callable[[str | None], None] | None = None
    # when the lease store last answered: a tick's end, or its listing when the feed then failed
    store_answered_at: float | None = None
    _tracker: ExpiryTracker | None = None
    _requested_at: dict[str, float] = field(default_factory=dict)
    _stop: asyncio.Event | None = None  # set when the host stops: a tick in flight takes nothing
    _logged_feed_problems: set[str] = field(default_factory=set)  # logged once each (paths, errors)
    _scan_skipped_logged: bool = False

    async def run(self, stop: asyncio.Event) -> None:
        self._tracker = ExpiryTracker(self.timings.expiry_s)
        self._stop = stop
        while not stop.is_set():
            error: str | None = None
            try:
                await self.tick()
                self.store_answered_at = self.clock.monotonic()
                self.ready.set()
            except LeaseStoreMisconfigured:
                raise  # retrying cannot fix it: the host stops with the error (exit 1)
            except (LeaseError, FeedError) as e:
                log.warning("balance.failed", error=str(e))
                if isinstance(e, LeaseError):  # a feed error says nothing of the lease store
                    error = str(e)
                    self.progress.store_errors.inc()
            if self.on_tick is not None:
                self.on_tick(error)
            # with --until-caught-up, a lease that just caught up may be the last one: look now
            await wait_any(stop, self.caught_up, timeout_s=self._until_next_tick())
            self.caught_up.clear()

    def _until_next_tick(self) -> float:
        """The jittered interval, or less when a lease would expire before then: the tick right
        after it takes a crashed host's leases without waiting for the next regular one."""
        assert self._tracker is not None
        return self.timings.next_look_in_s(
            jitter=self.rng.uniform(-JITTER_FRACTION, JITTER_FRACTION),
            due=self._tracker.next_expiry(self.me),
            now=self.clock.monotonic(),
        )

    async def tick(self) -> None:
        assert self._tracker is not None
        leases = await self.store.list_leases()
        self.store_answered_at = self.clock.monotonic()
        leases += await self._create_scan(leases)
        leases += await self._create_missing({lease.token for lease in leases})
        self.book.update_from(leases)
        self.stats.ticks += 1
        self.parked = [x for x in leases if x.parked]
        if await self._is_paused():
            # leases stay where they are, idle; renewals go on. A hand-over already under way
            # completes (its owner released the lease to us), so that no lease is left free.
            for lease in leases:
                if lease.owner is None and lease.next_owner == self.me and not lease.parked:
                    await self._take(lease, forced=False)
            return
        if self.on_caught_up is not None and leases and await self._all_done(leases):
            log.info("processor.caught_up", leases=len(leases), parked=len(self.parked))
            self.on_caught_up()
            return
        # a finished scan partition needs no owner: nobody takes it, and it counts for no host
        active = [x for x in leases if not (is_scan_token(x.token) and x.caught_up)]
        views = self._tracker.observe(active, self.clock.monotonic())
        held = self.supervisor.tokens()
        plan = plan_takes(views, me=self.me, limits=self.limits, rng=self.rng, held=held)
        forced = self._overdue_requests(views)
        self.stats.last_hosts, self.stats.last_target = plan.hosts, plan.target
        log.log(
            20 if not plan.is_empty or forced else 10,
            "balance.planned",
            leases=len(leases),
            hosts=plan.hosts,
            target=plan.target,
            mine=plan.mine,
            free=sum(1 for v in views if v.owner is None),
            expired=sum(1 for v in views if v.is_expired and v.owner is not None),
            acquire=[x.token for x in plan.acquire],
            steal=[x.token for x in plan.steal],
            forced=[x.token for x in forced],
        )
        for lease in (*plan.acquire, *forced):
            if self._stopping():
                return
            await self._take(lease, forced=lease in forced)
        for lease in plan.steal:
            if self._stopping():
                return
            if await self.store.request_handover(lease, self.me) is not None:
                self._requested_at[lease.token] = self.clock.monotonic()
                self.stats.requested += 1
                log.info("lease.handover_requested", lease=lease.token, owner=lease.owner)

    async def _take(self, lease: Lease, *, forced: bool) -> None:
        """Acquire `lease` and start its worker (nothing when another host was faster, or the
        owner wrote: the next tick decides)."""
        got = await self.store.acquire(lease, self.me)
        if got is None:
            return
        self._requested_at.pop(lease.token, None)
        self.stats.acquired += 1
        self.stats.forced += forced
        self.progress.acquired.inc()
        if lease.owner not in (None, self.me):
            self.progress.stolen.inc()
        log.info("lease.acquired", lease=got.token, epoch=got.epoch, was=lease.owner)
        self.supervisor.start(got)

    async def _is_paused(self) -> bool:
        """Read the processor row; pause or resume this host's workers to match it."""
        state = await self.store.processor_state()
        if state.paused != self.paused:
            log.info(
                "processor.paused" if state.paused else "processor.resumed", reason=state.reason
            )
        self.paused = state.paused
        if state.paused:
            self.running.clear()
        else:
            self.running.set()
        return state.paused

    async def _all_done(self, leases: list[Lease]) -> bool:
        """Every lease caught up, or parked, or waiting at the barrier for parked leases only:
        nothing more will be delivered until an operator acts, so waiting is pointless."""
        if all(x.caught_up or x.parked for x in leases):
            return True
        try:
            segments = await self.catalog.segments()
        except FeedCorrupt:
            return False
        return all(
            x.caught_up or x.parked or self.book.is_stalled(x.token, segments) for x in leases
        )

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _overdue_requests(self, views: list[LeaseView]) -> list[Lease]:
        """Leases we asked for long ago that their owner keeps renewing without letting go."""
        now = self.clock.monotonic()
        overdue: list[Lease] = []
        for v in views:
            asked = self._requested_at.get(v.token)
            if v.lease.next_owner != self.me or v.owner in (None, self.me):
                self._requested_at.pop(v.token, None)
            elif asked is not None and now - asked >= self.timings.handover_timeout_s:
                overdue.append(v.lease)
        return overdue

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
        self.initial_continuation = feed_start_after_scan(scans + added)
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
                self.stats.created += 1
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
        self._logged_feed_problems = set(bad)
        created: list[Lease] = []
        for name in sorted(names - existing):
            row = await self.store.create_if_absent(LeaseToken(name), self.initial_continuation)
            if row is None:
                row = await self.store.get(LeaseToken(name))
            else:
                self.stats.created += 1
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


def feed_start_after_scan(scans: list[Lease]) -> str | None:
    """The continuation of a feed lease made alongside a scan: from the scan's start minus the
    segment slack, so that every change a listing may have missed is delivered (a change older
    than that is in the listing)."""
    started = [x.started_at for x in _scan_positions(scans)]
    if not started:
        return None
    return LeasePosition(start_time=min(started) - TIME_SLACK).to_json()
