"""The balancing loop: list, create, observe, plan, write, log. The decisions are pure functions:
`plan_takes` (leases/policy/balancing.py), `nothing_left` and `why_idle` below, `overdue_requests`
(leasing/stealing.py); the rows of new shards and of an initial scan are `LeaseCreator`'s
(lease_creator.py), the listing is `TableListing`'s (table_listing.py), the writes that take
leases are `LeaseTaker`'s (leasing/taking.py, the steals leasing/stealing.py).

A settled host lists only the slices of the table it watches (`leases/policy/watching.py`); it lists
everything after a tick that found something to do, while a hand-over it asked for is pending,
with `--until-caught-up`, and at a slow safety-net pace.

Driven by the host every `acquire_every_s` with +/-20 % jitter (fixed delay), and sooner when a
lease this host watches would expire before the next tick (`ExpiryTracker.next_expiry`). Each
tick also feeds the segment barrier with fresh positions.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry

from leases import (
    BalanceLimits,
    HostId,
    Lease,
    LeaseError,
    LeaseStore,
    LeaseStoreMisconfigured,
    LeaseToken,
    LeaseView,
    LoadRule,
    ProcessorState,
    TakePlan,
    plan_takes,
)
from leases.policy.timings import Timings
from leases.policy.watching import (
    balance_note,
    expired_to_take,
    in_ranges,
    is_settled,
)
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedCorrupt, FeedError
from processor.clock import Clock
from processor.host.balancing.lease_creator import LeaseCreator
from processor.host.balancing.peer_liveness import PeerLiveness
from processor.host.balancing.table_listing import Listed, TableListing
from processor.host.health.host_progress import BalancingRecorder
from processor.host.host_config import HostConfig
from processor.host.leasing.taking import LeaseTaker
from processor.host.running.worker_supervisor import WorkerSupervisor
from processor.host.worker.worker_env import WorkerEnv, WorkerSignals
from processor.reading.lease_position import LeasePosition, is_finished_lease
from processor.reading.position_book import PositionBook
from processor.waiting import wait_any

log = structlog.get_logger("cfp.balancer")


def nothing_left(leases: list[Lease], stalled: Collection[str] = ()) -> bool:
    """Every lease caught up, or parked, or waiting at the barrier for parked leases only
    (`stalled`): nothing more will be delivered until an operator acts."""
    return all(x.caught_up or x.parked or x.token in stalled for x in leases)


def why_idle(
    views: list[LeaseView], plan: TakePlan, *, me: HostId, finished: int, holding: int
) -> str:
    """Why a host holds no lease after this tick (empty when it holds or takes one): for
    `cfp status`, so that an idle host is not taken for a stuck one."""
    if holding or plan.acquire:
        return ""
    if not views:
        return "every lease has finished" if finished else "no lease yet: the feed has no shard"
    if plan.steal:
        return "asked for a hand-over; the owner lets go after its batch in hand"
    if any(v.lease.next_owner == me for v in views):
        return "a hand-over to this host is under way"
    if any(v.owner not in (None, me) and not v.is_live for v in views):
        return "waiting for the leases of silent hosts to expire (judged on its own clock)"
    leases, others = len(views), plan.hosts - 1
    return (
        f"nothing to take: {leases} lease{'s' * (leases != 1)} held by "
        f"{others} other host{'s' * (others != 1)}"
    )


@dataclass(frozen=True, slots=True)
class TickReport:
    """What a balancing tick tells the host (its health, its row, its exit code), pushed after
    every tick: the host reads nothing else of the balancer."""

    went_through: bool  # listed, created and planned
    store_error: str | None  # the lease store's error (None: it answered, or the feed failed)
    store_answered_at: float | None  # monotonic: the tick's listing, when it got that far
    paused: bool  # the processor row says so
    parked: tuple[Lease, ...]  # leases parked on bad data or a failing observer
    idle_because: str  # why this host holds no lease ("" when it holds one)


@dataclass(frozen=True, slots=True)
class BalancerParts:
    """What a balancer works with: the table, the feed, the workers it starts, the positions it
    feeds the segment barrier, and where it reports."""

    store: LeaseStore
    catalog: FeedCatalog
    supervisor: WorkerSupervisor
    book: PositionBook
    creator: LeaseCreator | None = None  # default: new leases start at the feed's beginning
    progress: BalancingRecorder | None = None
    signals: WorkerSignals | None = None  # shared with the workers
    on_tick: Callable[[TickReport], None] | None = None


@dataclass(frozen=True, slots=True)
class BalancingRules:
    """How a balancer decides: as whom, at what intervals, within what limits."""

    me: HostId
    timings: Timings
    limits: BalanceLimits = field(default_factory=BalanceLimits)
    by_load: LoadRule | None = None  # --balance-by load
    until_caught_up: bool = False  # stop the host once nothing is left


class Balancer:
    def __init__(
        self,
        parts: BalancerParts,
        rules: BalancingRules,
        *,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        store, catalog, timings = parts.store, parts.catalog, rules.timings
        self.store, self.catalog = store, catalog
        self.supervisor, self.book = parts.supervisor, parts.book
        self.me, self.timings, self.clock = rules.me, timings, clock
        self._peers = PeerLiveness(self.me, window_s=timings.expiry_s)
        self.creator = parts.creator or LeaseCreator(store, catalog, clock)
        self.limits = rules.limits
        self.rng = rng or random.Random()
        self.progress = parts.progress or BalancingRecorder(CollectorRegistry())
        signals = parts.signals or WorkerSignals(stop=asyncio.Event())
        self.running = signals.running  # cleared while the processor is paused
        self.caught_up = signals.caught_up or asyncio.Event()  # a lease just caught up
        self.on_caught_up = signals.stop.set if rules.until_caught_up else None
        self.on_tick = parts.on_tick
        self.by_load = rules.by_load
        me = self.me
        self._listing = TableListing(store, me, expiry_s=timings.expiry_s, counts=self.progress)
        self.paused = False  # as of the last tick
        self._parked: list[Lease] = []
        self._idle_because = ""
        self._answered_at: float | None = None  # a tick's end, or its listing when the feed failed
        self._taker = LeaseTaker(store, self.supervisor, me=me, clock=clock, counts=self.progress)
        self._stop = asyncio.Event()  # set when the host stops: a tick in flight takes nothing

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        while not stop.is_set():
            error: str | None = None
            went_through = False
            try:
                await self.tick()
                self._answered_at = self.clock.monotonic()
                went_through = True
            except LeaseStoreMisconfigured:
                raise  # retrying cannot fix it: the host stops with the error (exit 1)
            except (LeaseError, FeedError) as e:
                log.warning("balance.failed", error=str(e))
                if isinstance(e, LeaseError):  # a feed error says nothing of the lease store
                    error = str(e)
                    self.progress.store_errors.inc()
            if self.on_tick is not None:
                self.on_tick(
                    TickReport(
                        went_through,
                        error,
                        self._answered_at,
                        self.paused,
                        tuple(self._parked),
                        self._idle_because,
                    )
                )
            # with --until-caught-up, a lease that just caught up may be the last one: look now
            await wait_any(stop, self.caught_up, timeout_s=self._until_next_tick())
            self.caught_up.clear()

    async def tick(self) -> None:
        """List (and create the leases of new shards), follow a pause, stop when nothing is
        left (`--until-caught-up`), else balance."""
        state = await self.store.processor_state()
        # a bounded run lists it all, and so does balancing by load: it weighs every rate
        listed = await self._listing.read(
            state.balance,
            mine=len(self.supervisor.tokens()),
            full=self.on_caught_up is not None or self.by_load is not None,
        )
        self._answered_at = self.clock.monotonic()
        made = await self.creator.create([*listed.fresh, *self._listing.unlisted(listed)])
        fresh_views, known = self._listing.take_in(listed, made, self.clock.monotonic())
        leases = [v.lease for v in known]
        if listed.is_full:
            self.book.update_from(leases)
        self._parked = [x for x in leases if x.parked]
        if self._follow(state):
            await self._taker.take_handed_over(leases, tick=self._listing.ticks)
            self._idle_because = "" if self.supervisor.tokens() else "the processor is paused"
            return
        if self.on_caught_up is not None and leases and await self._nothing_left(leases):
            log.info("processor.caught_up", leases=len(leases), parked=len(self._parked))
            self.on_caught_up()
            return
        await self._balance(state, listed, fresh_views, known, made=bool(made))

    async def _balance(
        self,
        state: ProcessorState,
        listed: Listed,
        fresh_views: list[LeaseView],
        known: list[LeaseView],
        *,
        made: bool,
    ) -> None:
        """Plan, note the balance for hosts that list less, take and ask; settled when there
        was nothing to do."""
        # a finished lease (a done scan partition, a lease read to its end time) needs no owner:
        # nobody takes it, and it counts for no host
        views = [v for v in known if not _is_finished(v.lease)]
        self.progress.unowned = sum(
            1 for v in views if not v.lease.parked and (v.owner is None or v.is_expired)
        )
        held = self.supervisor.tokens()
        plan = await self._plan(views, held)
        finished = len(known) - len(views)
        self._idle_because = why_idle(views, plan, me=self.me, finished=finished, holding=len(held))
        forced = self._taker.overdue(views, after_s=self.timings.handover_timeout_s)
        fresh_active = [v for v in fresh_views if not _is_finished(v.lease)]
        if listed.is_full and (note := balance_note(views, self.me)) != state.balance:
            await self.store.note_balance(note)  # for the hosts that list only what they watch
        # expired leases this host watches: taken whatever the target (only watchers see them)
        watched = [v for v in fresh_active if in_ranges(v.token, listed.watched)]
        forced += expired_to_take(watched, [*plan.acquire, *forced])
        _log_plan(plan, forced, views, leases=len(known))
        done = await self._taker.carry_out(plan, forced, tick=self._listing.ticks, stop=self._stop)
        self._listing.settled = (
            done
            and plan.is_empty
            and not forced
            and not made
            and not self._taker.asking
            and is_settled(fresh_active, me=self.me, held=set(held))
        )

    async def _plan(self, views: list[LeaseView], held: Collection[LeaseToken]) -> TakePlan:
        """What to take this tick; with free leases to share out, the other live hosts (from
        their rows, listed only then: never at rest) count too."""

        def plan(peers: frozenset[HostId] = frozenset()) -> TakePlan:
            return plan_takes(
                views,
                me=self.me,
                limits=self.limits,
                rng=self.rng,
                held=held,
                by_load=self.by_load,
                peers=peers,
            )

        first = plan()
        if not first.acquire:
            return first
        now, wall = self.clock.monotonic(), self.clock.wall()
        peers = await self._peers.look(self.store, now=now, wall=wall)
        return plan(peers) if peers else first

    def _follow(self, state: ProcessorState) -> bool:
        """Pause or resume this host's workers as the processor row says; whether paused."""
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

    async def _nothing_left(self, leases: list[Lease]) -> bool:
        if nothing_left(leases):
            return True
        try:
            segments = await self.catalog.segments()
        except FeedCorrupt:
            return False
        stalled = {x.token for x in leases if self.book.is_stalled(x.token, segments)}
        return nothing_left(leases, stalled)

    def _until_next_tick(self) -> float:
        """The jittered interval, or less when a lease would expire before then: the tick right
        after it takes a crashed host's leases without waiting for the next regular one."""
        due = self._listing.next_expiry(self.me)
        return self.timings.next_look(self.rng, due=due, now=self.clock.monotonic())


def host_balancer(
    config: HostConfig,
    env: WorkerEnv,
    supervisor: WorkerSupervisor,
    *,
    store: LeaseStore,
    ticks: Callable[[TickReport], None],
    counts: BalancingRecorder,
) -> Balancer:
    """The balancer of the host `config` describes, starting its workers in `supervisor`;
    new leases start where `config` says."""
    deps, new = env.deps, config.new_leases
    start, end = new.start_time, config.reading.end_time
    creator = LeaseCreator(
        store,
        deps.catalog,
        deps.clock,
        initial_continuation=None
        if start is None and end is None
        else LeasePosition(start_time=start, end_time=end).to_json(),
        scan_partitions=new.scan_partitions if new.initial_scan else 0,
    )
    parts = BalancerParts(
        store,
        deps.catalog,
        supervisor,
        deps.book,
        creator=creator,
        progress=counts,
        signals=env.signals,
        on_tick=ticks,
    )
    rules = BalancingRules(
        config.placement.host_name,
        config.timings,
        by_load=config.by_load,
        until_caught_up=config.until_caught_up,
    )
    return Balancer(parts, rules, clock=deps.clock)


def _is_finished(lease: Lease) -> bool:
    return is_finished_lease(lease.continuation, caught_up=lease.caught_up)


def _log_plan(plan: TakePlan, forced: list[Lease], views: list[LeaseView], *, leases: int) -> None:
    log.log(
        20 if not plan.is_empty or forced else 10,
        "balance.planned",
        leases=leases,
        hosts=plan.hosts,
        target=plan.target,
        mine=plan.mine,
        free=sum(1 for v in views if v.owner is None),
        expired=sum(1 for v in views if v.is_expired and v.owner is not None),
        acquire=[x.token for x in plan.acquire],
        steal=[x.token for x in plan.steal],
        forced=[x.token for x in forced],
    )
