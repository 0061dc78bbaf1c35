"""The balancing loop: list, create, observe, plan, write, log. The decisions are pure functions:
`plan_takes` (leases/balancing.py), `overdue_requests` and `nothing_left` below; the rows of new
shards and of an initial scan are `LeaseCreator`'s (lease_creation.py).

A settled host lists only the slices of the table it watches (`leases/watching.py`); it lists
everything after a tick that found something to do, while a hand-over it asked for is pending,
with `--until-caught-up`, and at a slow safety-net pace.

Driven by the host every `acquire_every_s` with +/-20 % jitter (fixed delay), and sooner when a
lease this host watches would expire before the next tick (`ExpiryTracker.next_expiry`). Each
tick also feeds the segment barrier with fresh positions.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection, Mapping

import structlog

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
from leases.peers import PeerLiveness
from leases.watching import (
    EVERYTHING,
    KeyRange,
    TableView,
    balance_note,
    expired_to_take,
    in_ranges,
    is_settled,
    ranges_to_list,
    watch_ranges,
)
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedCorrupt, FeedError
from processor.clock import Clock
from processor.host.lease_creation import LeaseCreator
from processor.host.progress import HostProgress
from processor.host.supervisor import WorkerSupervisor
from processor.host.timings import JITTER_FRACTION, Timings
from processor.reading.barrier_book import PositionBook
from processor.reading.lease_position import is_finished_lease
from processor.waiting import running_event, wait_any

log = structlog.get_logger("cfp.balancer")


def overdue_requests(
    views: list[LeaseView], asked_at: Mapping[str, float], *, me: HostId, now: float, after_s: float
) -> tuple[list[Lease], dict[str, float]]:
    """Leases this host asked for at least `after_s` ago whose owner keeps renewing them without
    letting go (taken by force), and the requests still open (those no longer pending dropped)."""
    overdue: list[Lease] = []
    still: dict[str, float] = {}
    for v in views:
        asked = asked_at.get(v.token)
        if asked is None or v.lease.next_owner != me or v.owner in (None, me):
            continue
        still[v.token] = asked
        if now - asked >= after_s:
            overdue.append(v.lease)
    return overdue, still


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


class Balancer:
    def __init__(
        self,
        store: LeaseStore,
        catalog: FeedCatalog,
        supervisor: WorkerSupervisor,
        book: PositionBook,
        *,
        me: HostId,
        timings: Timings,
        clock: Clock,
        creator: LeaseCreator | None = None,
        limits: BalanceLimits | None = None,
        rng: random.Random | None = None,
        progress: HostProgress | None = None,
        running: asyncio.Event | None = None,  # cleared while the processor is paused
        caught_up: asyncio.Event | None = None,  # set by a worker whose lease just caught up
        on_caught_up: Callable[[], None] | None = None,  # --until-caught-up: nothing left
        on_tick: Callable[[str | None], None] | None = None,  # None, or the store's error
        by_load: LoadRule | None = None,  # --balance-by load
    ) -> None:
        self.store, self.catalog, self.supervisor, self.book = store, catalog, supervisor, book
        self.me, self.timings, self.clock = me, timings, clock
        self._peers = PeerLiveness(me, window_s=timings.expiry_s)
        self.creator = creator or LeaseCreator(store, catalog, clock)
        self.limits = limits or BalanceLimits()
        self.rng = rng or random.Random()
        self.progress = progress or HostProgress()
        self.running = running or running_event()
        self.caught_up = caught_up or asyncio.Event()
        self.on_caught_up, self.on_tick = on_caught_up, on_tick
        self.by_load = by_load
        self.ready = asyncio.Event()  # set after the first tick that went through
        self.paused = False  # as of the last tick
        self.parked: list[Lease] = []  # as of the last tick
        self.idle_because = ""  # why this host holds no lease, as of the last tick
        # when the lease store last answered: a tick's end, or its listing when the feed failed
        self.store_answered_at: float | None = None
        self._view = TableView.empty(timings.expiry_s)
        self._ticks = 0
        self._full_at_tick: int | None = None  # the tick of the last full listing
        self._settled = False  # the last tick found nothing to do: the next may list less
        self._asked_at: dict[str, float] = {}  # hand-overs this host requested, and when
        self._stop = asyncio.Event()  # set when the host stops: a tick in flight takes nothing

    async def run(self, stop: asyncio.Event) -> None:
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

    async def tick(self) -> None:
        self._ticks += 1
        state = await self.store.processor_state()
        # the slices this host watches, as its view stood before this tick's listing
        watched = watch_ranges(self._view.rows, self._view.hosts(), self.me)
        fresh, ranges = await self._list(state, watched)
        self._settled = False  # until this tick has gone through and found nothing to do
        self.store_answered_at = self.clock.monotonic()
        others = [x for t, x in self._view.rows.items() if not in_ranges(t, ranges)]
        made = await self.creator.create([*fresh, *others])
        fresh_views, known = self._view.listed([*fresh, *made], self.clock.monotonic(), ranges)
        leases = [v.lease for v in known]
        if ranges == [EVERYTHING]:
            self.book.update_from(leases)
        self.parked = [x for x in leases if x.parked]
        if self._follow(state):
            await self._take_handed_over(leases)
            self.idle_because = "" if self.supervisor.tokens() else "the processor is paused"
            return
        if self.on_caught_up is not None and leases and await self._nothing_left(leases):
            log.info("processor.caught_up", leases=len(leases), parked=len(self.parked))
            self.on_caught_up()
            return
        # a finished lease (a done scan partition, a lease read to its end time) needs no owner:
        # nobody takes it, and it counts for no host
        views = [v for v in known if not _is_finished(v.lease)]
        self.progress.unowned = sum(
            1 for v in views if not v.lease.parked and (v.owner is None or v.is_expired)
        )
        held = self.supervisor.tokens()
        plan = await self._plan(views, held)
        self.idle_because = why_idle(
            views,
            plan,
            me=self.me,
            finished=len(leases) - len(views),
            holding=len(held),
        )
        forced, self._asked_at = overdue_requests(
            views,
            self._asked_at,
            me=self.me,
            now=self.clock.monotonic(),
            after_s=self.timings.handover_timeout_s,
        )
        fresh_active = [v for v in fresh_views if not _is_finished(v.lease)]
        if ranges == [EVERYTHING] and (note := balance_note(views, self.me)) != state.balance:
            await self.store.note_balance(note)  # for the hosts that list only what they watch
        # expired leases this host watches: taken whatever the target (only watchers see them)
        forced += expired_to_take(
            [v for v in fresh_active if in_ranges(v.token, watched)], [*plan.acquire, *forced]
        )
        _log_plan(plan, forced, views, leases=len(leases))
        done = await self._carry_out(plan, forced)
        self._settled = (
            done
            and plan.is_empty
            and not forced
            and not made
            and not self._asked_at
            and is_settled(fresh_active, me=self.me, held=set(held))
        )

    async def _list(
        self, state: ProcessorState, watched: list[KeyRange]
    ) -> tuple[list[Lease], list[KeyRange]]:
        """This tick's rows: every lease, or only the watched slices once settled."""
        since_full = None if self._full_at_tick is None else self._ticks - self._full_at_tick
        # a bounded run lists it all, and so does balancing by load: it weighs every rate
        settled = self._settled and self.on_caught_up is None and self.by_load is None
        ranges = ranges_to_list(
            self._view,
            self.me,
            settled=settled,
            ticks_since_full=since_full,
            note=state.balance,
            mine=len(self.supervisor.tokens()),
            watched=watched,
        )
        if ranges == [EVERYTHING]:
            self._full_at_tick = self._ticks
            self.progress.listings.labels("full").inc()
            return await self.store.list_leases(), ranges
        self.progress.listings.labels("watch").inc()
        rows = [x for lo, hi in ranges for x in await self.store.list_range(lo, hi)]
        return rows, ranges

    async def _carry_out(self, plan: TakePlan, forced: list[Lease]) -> bool:
        """Acquire what the plan and the overdue hand-overs say, then ask for the steals. False
        when a write lost its race (the table changed since the listing)."""
        done = True
        for lease in (*plan.acquire, *forced):
            if self._stop.is_set():
                return done
            done = await self._take(lease, forced=lease in forced) and done
        for lease in plan.steal:
            if self._stop.is_set():
                return done
            if await self.store.request_handover(lease, self.me) is not None:
                self._asked_at[lease.token] = self.clock.monotonic()
                log.info("lease.handover_requested", lease=lease.token, owner=lease.owner)
            else:
                done = False
        return done

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

    async def _take(self, lease: Lease, *, forced: bool) -> bool:
        """Acquire `lease` and start its worker (nothing when another host was faster, or the
        owner wrote: the next tick decides)."""
        got = await self.store.acquire(lease, self.me)
        if got is None:
            return False
        self._asked_at.pop(lease.token, None)
        self.progress.acquired.inc()
        if lease.owner not in (None, self.me):
            self.progress.stolen.inc()
        log.info(
            "lease.acquired",
            lease=got.token,
            epoch=got.epoch,
            was=lease.owner,
            forced=forced,
            tick=self._ticks,  # this balancer's tick count: how soon, counted in its own ticks
        )
        self.supervisor.start(got)
        return True

    async def _take_handed_over(self, leases: list[Lease]) -> None:
        """While paused, leases stay where they are, idle; renewals go on. A hand-over already
        under way completes (its owner released the lease to us), so that no lease is left
        free."""
        for lease in leases:
            if lease.owner is None and lease.next_owner == self.me and not lease.parked:
                await self._take(lease, forced=False)

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
        return self.timings.next_look_in_s(
            jitter=self.rng.uniform(-JITTER_FRACTION, JITTER_FRACTION),
            due=self._view.tracker.next_expiry(self.me),
            now=self.clock.monotonic(),
        )


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
