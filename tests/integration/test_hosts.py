"""Real `cfp run` processes sharing one feed through leases in Azurite's Table service.

One feed of 12,000 events (4 segments, shard counts 6, 9, 6, 8: nine leases, and blobs that move
between shards from one segment to the next) is emulated once for the module; each test runs its
own processor (its own lease rows) over it. Intervals are short: expiry 3 s, renew 1 s, balance
1 s. Unless a test says otherwise, host wall clocks are skewed by +5 and -5 minutes, which must
change nothing: expiry is judged on each host's monotonic clock.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from leases import Lease
from leases.store.table_settings import DEFAULT_LEASE_PARTITIONS
from processor.changefeed.selection import parse_event_time
from processor.emulator.azurite import Azurite
from tests import patience
from tests.cluster import (
    Cluster,
    Table,
    all_caught_up,
    is_balanced,
    order_violations,
    quick_host_args,
    sampled,
)
from tests.helpers import emulate_afresh, get_text, metric, per_blob, read_all, until

EXPIRY_S, ACQUIRE_S = 3.0, 1.0  # quick_host_args: renew and balance every second
PARTITIONS = DEFAULT_LEASE_PARTITIONS  # a new processor's leases are spread over these
JITTER = 1.2  # a balancing tick may come up to 20 % late
ARGS = quick_host_args(batch=100, expiry_s=EXPIRY_S)
SKEWS = {"h1": 300.0, "h2": -300.0, "h3": 0.0, "h4": 120.0}
_processors = itertools.count()

pytestmark = pytest.mark.timeout(240)


@dataclass
class Feed:
    conn: str
    ids: set[str]
    order: dict[str, list[str]]


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    conn = azurite.connection_string
    records = await emulate_afresh(
        conn, seed=11, segments=4, events_per_segment=1500, shards=(6, 9, 6, 8),
        feed_only=True,  # the hosts never look at the blobs
    )  # fmt: skip
    ids = {str(r["id"]) for r in records}
    assert len(ids) >= 6_000
    return Feed(conn, ids, per_blob(records))


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(
        feed.conn,
        f"hosts{next(_processors)}",
        tmp_path,
        args=ARGS,
        env={"CFP_TEST_BATCH_DELAY_S": "0.3"},  # half the events of old, paced half as fast
    )
    try:
        yield c
    finally:
        c.kill_all()


@pytest.fixture
async def table(cluster: Cluster) -> AsyncIterator[Table]:
    """The lease table, sampled every 0.2 s for the whole test (continuations never go back)."""
    async with cluster.store() as store, sampled(store) as view:
        yield view


async def settled(cluster: Cluster, table: Table, hosts: set[str], *, quiet: int) -> list[Lease]:
    """The lease table once every lease is held by one of `hosts`, each of them holds one, and
    no owner changed and no hand-over was asked for while each host made `quiet` balancing
    ticks (ticks, not seconds: a host starved of CPU ticks late)."""
    deadline, last, since = patience.deadline(), None, {}
    while time.monotonic() < deadline:
        rows = await table.leases()
        owners = {r.token: (r.owner, r.epoch, r.next_owner) for r in rows}
        now = {name: await ticks(cluster, name) for name in hosts}
        if owners != last:
            last, since = owners, now
        elif (
            all(r.owner in hosts for r in rows)
            and {r.owner for r in rows} == hosts
            and all(now[name] - since[name] >= quiet for name in hosts)
        ):
            return rows
        await asyncio.sleep(0.2)
    raise AssertionError(f"owners never settled: {last}")


async def ticks(cluster: Cluster, name: str) -> int:
    """How many balancing ticks host `name` has made (one lease-table listing each)."""
    return await cluster.ticks(name)


Mark = dict[str, int]  # where each host's log was at some moment of a test: what came after


def mark(cluster: Cluster) -> Mark:
    return {name: len(cluster.log_events(name)) for name in cluster.procs}


def logged_since(cluster: Cluster, since: Mark, name: str) -> list[dict[str, Any]]:
    return cluster.log_events(name)[since.get(name, 0) :]


def acquisitions(
    cluster: Cluster, *names: str, since: Mark | None = None, **fields: object
) -> list[dict[str, Any]]:
    """Every `lease.acquired` the hosts `names` logged (since `since`; with these fields), with
    its host."""
    return [
        {**e, "host": name}
        for name in names
        for e in logged_since(cluster, since or {}, name)
        if e.get("event") == "lease.acquired" and all(e.get(k) == v for k, v in fields.items())
    ]


def failed_ticks(cluster: Cluster, since: Mark, acquired: dict[str, Any]) -> int:
    """Balancing ticks the host of `acquired` logged as failed (`balance.failed`: the lease store
    did not answer in time, and the tick took nothing) since `since`, before it took that lease."""
    name = acquired["host"]
    return sum(
        1
        for e in logged_since(cluster, since, name)
        if e["_line"] < acquired["_line"] and e.get("event") == "balance.failed"
    )


def moved_by_expiry(cluster: Cluster, since: Mark) -> set[str]:
    """Leases whose holder stopped using them since `since` without letting go: it lost them
    (a renewal too late to keep them: fenced; or refused), or could not release them in time.
    On a busy machine that is the product's rule at work; another host then takes them once
    they expire, at a tick of its own, not by the moves a test is about."""
    return {
        str(e["lease"])
        for name in cluster.procs
        for e in logged_since(cluster, since, name)
        if (e.get("event") == "worker.stopped" and e.get("reason") == "lease_lost")
        or e.get("event") == "lease.release_failed"
    }


def start(cluster: Cluster, *names: str, skewed: bool = True) -> None:
    for name in names:
        cluster.start(name, skew_s=SKEWS[name] if skewed else 0.0)


async def progress(cluster: Cluster, feed: Feed, share: float) -> None:
    """Wait until `share` of the feed has been delivered."""
    deadline = patience.deadline()
    while len({d["id"] for d in cluster.deliveries()}) < share * len(feed.ids):
        assert time.monotonic() < deadline, "no progress"
        assert cluster.running(), "every host exited"
        await asyncio.sleep(0.1)


def check_complete(cluster: Cluster, feed: Feed, table: Table, *, exactly_once: bool) -> None:
    counts = cluster.delivered()
    missing = feed.ids - set(counts)
    assert not missing, f"{len(missing)} events never delivered"
    assert not set(counts) - feed.ids, "delivered events that are not in the feed"
    if exactly_once:
        # a lease handed over cleanly, or released, redelivers nothing; one taken by force (its
        # owner, starved on a busy machine, did not let go in time) or after expiry may
        # redeliver the batch in hand, and only its leases may
        twice = {eid for eid, n in counts.items() if n > 1}
        leases = {d["lease"] for d in cluster.deliveries() if d["id"] in twice}
        hosts = cluster.procs.keys() | cluster.exited.keys()
        taken = {
            a["lease"] for a in acquisitions(cluster, *hosts) if a["forced"] or a["was"] is not None
        }
        assert leases <= taken, f"{len(twice)} events delivered twice, on leases {leases - taken}"
    assert not order_violations(cluster.deliveries(), feed.order)
    assert table.watch.samples > 5, table.watch.samples
    assert not table.watch.backwards, "\n".join(table.watch.backwards)


async def test_three_hosts_share_the_feed_in_order_and_balanced(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    start(cluster, "h1", "h2", "h3")
    await table.until(all_caught_up, what="every lease caught up")
    rows = await table.leases()
    assert is_balanced(rows, {"h1", "h2", "h3"})
    check_complete(cluster, feed, table, exactly_once=True)
    before = {r.token: r.continuation for r in rows}
    assert cluster.stop_all() == {"h1": 0, "h2": 0, "h3": 0}
    after = await table.leases()
    assert all(r.owner is None for r in after), "a graceful stop releases every lease"
    assert {r.token: r.continuation for r in after} == before, "release keeps continuations"
    epochs = {r.token: r.epoch for r in rows}
    assert {r.token: r.epoch for r in after} == epochs, "hosts stopping together take nothing"


async def test_kill_9_leases_taken_within_expiry_plus_one_tick(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    start(cluster, "h1", "h2", "h3")
    await progress(cluster, feed, 0.25)
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3"}), what="balance")

    async def h2_reported() -> bool:  # its host row shows the leases it holds
        return any(r.name == "h2" and r.leases > 0 for r in await table.store.list_hosts())

    await until(h2_reported, "h2's row reporting its leases")
    # on a busy machine a host may fence a lease it could not renew in time, and another then
    # takes it: such moves before the kill are the product's rule, not h2's death
    before = mark(cluster)
    held = {r.token for r in await table.leases() if r.owner == "h2"}
    cluster.signal("h2", signal.SIGKILL)
    at_kill = {name: await ticks(cluster, name) for name in ("h1", "h3")}
    await table.until(
        lambda rows: all(r.owner in ("h1", "h3") for r in rows),
        what="h2's leases taken",
    )
    # taken once expired, within the expiry plus a tick, counted in the takers' own ticks
    # (a tick comes every ACQUIRE_S, at most 20 % early; one more wakes a host at an expiry),
    # and only ticks that went through: one the lease store failed takes nothing
    taken = acquisitions(cluster, "h1", "h3", since=before, was="h2")
    assert held <= {a["lease"] for a in taken}, (held, taken)
    within = math.ceil(EXPIRY_S / (ACQUIRE_S / JITTER)) + 2
    late = [
        a
        for a in taken
        if a["tick"] - at_kill[a["host"]] - failed_ticks(cluster, before, a) > within
    ]
    assert not late, (at_kill, late)
    # their watchers take them whatever their count; hand-overs then even the counts out
    await table.until(lambda rows: is_balanced(rows, {"h1", "h3"}), what="balance of two")
    moved = moved_by_expiry(cluster, before)
    after = [
        a
        for a in acquisitions(cluster, "h1", "h3", since=before)
        if a["was"] != "h2" and a["lease"] not in moved
    ]
    last = {a["host"]: a["tick"] for a in taken}
    slow = [
        a
        for a in after
        if a["tick"] - failed_ticks(cluster, before, a) - last.get(a["host"], a["tick"])
        > 3 + within
    ]
    assert not slow, (last, slow)
    # the killed host's row still says what it last reported; its lease count is the table's
    hosts = {h["host"]: h for h in cluster.status()["hosts"]}
    assert hosts["h2"]["leases"] == 0 and hosts["h2"]["leasesReported"] > 0
    await table.until(all_caught_up, what="every lease caught up")
    check_complete(cluster, feed, table, exactly_once=False)
    assert cluster.stop_all()["h1"] == 0


async def test_sigterm_hands_leases_over_quickly_without_duplicates(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    start(cluster, "h1", "h2", "h3")
    await progress(cluster, feed, 0.25)
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3"}), what="balance")
    before = mark(cluster)
    held = {r.token for r in await table.leases() if r.owner == "h2"}
    cluster.signal("h2", signal.SIGTERM)
    at_stop = {name: await ticks(cluster, name) for name in ("h1", "h3")}
    await table.until(lambda rows: is_balanced(rows, {"h1", "h3"}), what="h2's leases moved")
    # handed over: released by h2 and taken free at the takers' next ticks (that went through),
    # none left to expire, but those a busy machine made h2 fence or fail to release. Each
    # taken as logged: a taker logs just after its write, which the table may show first

    async def taken_as_logged() -> list[dict[str, Any]] | None:
        got = [a for a in acquisitions(cluster, "h1", "h3", since=before) if a["lease"] in held]
        return got if {a["lease"] for a in got} == held else None

    taken = await until(taken_as_logged, "h2's leases taken, as the takers logged")
    handed = [a for a in taken if a["lease"] not in moved_by_expiry(cluster, before)]
    assert all(a["was"] is None for a in handed), handed
    slow = [
        a for a in handed if a["tick"] - at_stop[a["host"]] - failed_ticks(cluster, before, a) > 3
    ]
    assert not slow, (at_stop, slow)
    assert await asyncio.to_thread(cluster.wait, "h2") == 0
    await table.until(all_caught_up, what="every lease caught up")
    check_complete(cluster, feed, table, exactly_once=True)


async def test_a_fourth_host_balances_within_three_ticks_without_duplicates(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    start(cluster, "h1", "h2", "h3")
    await progress(cluster, feed, 0.2)
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3"}), what="balance")
    before = mark(cluster)
    start(cluster, "h4")
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3", "h4"}), what="balance of 4")
    # within three ticks of its first, counted in its own ticks that went through (leases a busy
    # machine made their holder fence come to it by expiry, at a tick of their own)
    moved = moved_by_expiry(cluster, before)
    taken = [a for a in acquisitions(cluster, "h4") if a["lease"] not in moved]
    assert taken and max(a["tick"] - failed_ticks(cluster, before, a) for a in taken) <= 1 + 3
    await table.until(all_caught_up, what="every lease caught up")
    check_complete(cluster, feed, table, exactly_once=True)


async def test_a_host_counts_the_live_hosts_rows_before_its_first_take(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    """Two hosts still opening their observer (their rows say `starting`), a third ready first:
    it takes its share of the nine leases, not all of them, and the others take the rest free
    when they are ready: no lease changes hands."""
    slow = ("--observer", "tests.plugins:slow_to_open")
    for name in ("h2", "h3"):
        cluster.start(name, *slow, CFP_TEST_OPEN_DELAY_S="8")

    async def starting_rows() -> bool:
        rows = await table.store.list_hosts()
        return {r.name for r in rows if r.state == "starting"} >= {"h2", "h3"}

    await until(starting_rows, "h2 and h3 starting")
    cluster.start("h1")
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3"}), what="balance of 3")
    rows = await table.leases()
    first = acquisitions(cluster, "h1")
    assert len(first) <= math.ceil(len(rows) / 3), first
    moved = moved_by_expiry(cluster, {})  # a lease a busy machine made its holder fence moves
    taken = [a for a in acquisitions(cluster, "h1", "h2", "h3") if a["lease"] not in moved]
    assert all(a["was"] is None for a in taken), taken  # every lease taken free, none moved
    await table.until(all_caught_up, what="every lease caught up")
    check_complete(cluster, feed, table, exactly_once=True)


async def test_at_rest_hosts_list_only_the_slices_they_watch(
    cluster: Cluster, table: Table
) -> None:
    """Three hosts, nine caught-up leases in the default four partitions: each host's lease-table
    requests, as its `cfp_lease_*` counters count them, are what a quiet tick costs: one read of
    the processor row and one listing of its watched slices (a query per partition; two ranges
    for the host whose slices wrap around), no full listing but the rare safety net, and at most
    2 x 9 / 3 rows per watch listing."""
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    start(cluster, "h1", "h2", "h3", skewed=False)
    await table.until(all_caught_up, what="every lease caught up")
    await settled(cluster, table, {"h1", "h2", "h3"}, quiet=3)
    urls = {name: await cluster.endpoint(name) for name in ("h1", "h2", "h3")}

    async def counters() -> dict[str, dict[str, float]]:
        out = {}
        for name, url in urls.items():
            text = await asyncio.to_thread(get_text, f"{url}/metrics")
            out[name] = {
                "full": metric(text, "cfp_lease_listings_total", kind="full"),
                "watch": metric(text, "cfp_lease_listings_total", kind="watch"),
                "list": metric(text, "cfp_lease_requests_total", kind="list"),
                "read": metric(text, "cfp_lease_requests_total", kind="read"),
                "rows": metric(text, "cfp_lease_rows_listed_total"),
                "failed": metric(text, "cfp_lease_store_errors_total"),
            }
        return out

    async def between_ticks() -> dict[str, dict[str, float]]:
        """The counters when no listing is under way: the same twice, a little apart (a
        listing's requests are counted as they go, the listing once it ends)."""
        seen, deadline = await counters(), patience.deadline()
        while time.monotonic() < deadline:
            await asyncio.sleep(0.15)
            again = await counters()
            if again == seen:
                return again
            seen = again
        raise AssertionError("the hosts' counters never stood still")

    async def six_ticks() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """The counters before and after six ticks of every host, however long they take, in
        which every tick went through (on a busy machine a tick the lease store failed ends
        early, its requests part made, and the next tick lists everything)."""
        deadline = patience.deadline()
        while True:
            before = await between_ticks()

            async def ticked(before: dict[str, dict[str, float]] = before) -> bool:
                now = await counters()
                return all(
                    now[n]["full"] + now[n]["watch"] - before[n]["full"] - before[n]["watch"] >= 6
                    for n in now
                )

            await until(ticked, "six ticks of every host", every_s=0.5)
            after = await between_ticks()
            if all(after[n]["failed"] == before[n]["failed"] for n in after):
                return before, after
            assert time.monotonic() < deadline, "no six ticks in a row went through"

    before, after = await six_ticks()
    rows = await table.leases()
    assert all_caught_up(rows) and is_balanced(rows, {"h1", "h2", "h3"}), "no longer at rest"
    for name in ("h1", "h2", "h3"):
        d = {k: after[name][k] - before[name][k] for k in before[name]}
        ticks = d["full"] + d["watch"]
        ranges = 2 if name == "h3" else 1  # h3, last of three, watches slices 2 and 0
        assert ticks >= 5 and d["full"] <= 1, (name, d)
        # a query per partition and range, each tick; under load (CI, once), one request more:
        # a listing's query retried or paged counts each attempt and page, and may list again
        # what it listed; at most one listing's worth more (a listing more each tick: 7 times)
        least = PARTITIONS * (d["full"] + ranges * d["watch"])
        assert least <= d["list"] <= least + PARTITIONS * ranges, (name, d)
        assert d["read"] == ticks, (name, d)  # the processor row, once a tick
        assert d["rows"] <= 9 * d["full"] + 6 * (d["watch"] + 1), (name, d)
        assert d["rows"] < 9 * ticks, (name, d)  # what listing everything would have cost


async def test_balance_by_load_moves_hot_leases_off_a_crowded_host_without_duplicates(
    cluster: Cluster, table: Table, tmp_path: Path
) -> None:
    # every lease slow at first (rates alike, but for shards with less to read); unordered: the
    # segment barrier would hold every lease to the pace of the slowest, hot ones included
    slow = tmp_path / "slow-leases"
    slow.write_text(",".join(f"{i:02d}" for i in range(9)))
    cluster.env.update(
        CFP_TEST_SLOW_FILE=str(slow), CFP_TEST_BATCH_DELAY_S="0.25", CFP_TEST_SLOW_DELAY_S="2"
    )
    for name in ("h1", "h2"):
        cluster.start(name, "--balance-by", "load", "--max-batch-events", "10", "--unordered")
    # quiet for longer than the rates take to be measured (a mean over about six renewals)
    rows = await settled(cluster, table, {"h1", "h2"}, quiet=8)
    # then the leases h1 holds turn hot (8x the read rate of h2's): h1 is crowded
    hot = sorted(r.token for r in rows if r.owner == "h1")
    before = mark(cluster)
    switched_ns = time.time_ns()
    slow.write_text(",".join(r.token for r in rows if r.owner == "h2"))
    epochs = {r.token: r.epoch for r in rows}

    def moved_hot(rows: list[Lease]) -> bool:
        return any(r.owner == "h2" and r.token in hot for r in rows)

    await table.until(moved_hot, what="a hot lease handed over to h2")
    history = []
    start, deadline = (
        {name: await ticks(cluster, name) for name in ("h1", "h2")},
        patience.deadline(),
    )
    while True:  # and it stays there for eight balancing ticks of each host: nothing flaps back
        rows = await table.leases()
        history.append({r.token: (r.owner, r.epoch, round(r.load)) for r in rows})
        if all([await ticks(cluster, n) - start[n] >= 8 for n in start]):
            break
        assert time.monotonic() < deadline, "no eight balancing ticks of each host"
        await asyncio.sleep(0.5)  # between two looks at the table
    on_h2 = [r.token for r in rows if r.owner == "h2" and r.token in hot]
    assert on_h2 and len(on_h2) < len(hot), (hot, [(r.token, r.owner) for r in rows])
    moved = moved_by_expiry(cluster, before)  # by a busy machine, not by the load rule
    flapped = [r.token for r in rows if r.epoch - epochs[r.token] > 1 and r.token not in moved]
    assert not flapped, (hot, epochs, history[-1])
    # the rates are written: hot leases read 8x faster, though a CPU-starved host (or a hot shard
    # read to its end) narrows that, so ask only for the direction, at its clearest sample
    ratios = [
        sum(load for t, (_, _, load) in seen.items() if t in hot)
        / max(1, sum(load for t, (_, _, load) in seen.items() if t not in hot))
        for seen in history
    ]
    assert max(ratios) > 1.2, ("rates are written", ratios)
    assert cluster.stop_all() == {"h1": 0, "h2": 0}
    # the moves redeliver nothing: no event delivered since the switch was delivered twice (a
    # host starved of CPU at start-up may fence a lease and see its batch redelivered then)
    since = {d["id"] for d in cluster.deliveries() if d["t"] >= switched_ns}
    twice = [eid for eid, n in cluster.delivered().items() if n > 1 and eid in since]
    assert not twice, f"{len(twice)} events delivered twice"


async def test_a_paused_host_delivers_nothing_of_the_leases_it_lost(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    start(cluster, "h1", "h2", "h3")
    await progress(cluster, feed, 0.25)
    await table.until(lambda rows: is_balanced(rows, {"h1", "h2", "h3"}), what="balance")
    held = {(r.token, r.epoch) for r in await table.leases() if r.owner == "h2"}
    cluster.signal("h2", signal.SIGSTOP)
    await table.until(lambda rows: is_balanced(rows, {"h1", "h3"}), what="h2's leases taken")
    # h2 stays frozen well past the expiry: while h1 and h3 make an expiry's worth of ticks more
    taken_at = {name: await ticks(cluster, name) for name in ("h1", "h3")}
    more = round(EXPIRY_S / ACQUIRE_S) + 1

    async def an_expiry_later() -> bool:
        now = {n: await ticks(cluster, n) for n in taken_at}
        return all(now[n] >= t + more for n, t in taken_at.items())

    await until(an_expiry_later, "h1 and h3 ticking an expiry past the takeover")
    resumed_ns = time.time_ns()
    cluster.signal("h2", signal.SIGCONT)
    await table.until(all_caught_up, what="every lease caught up")
    late = [
        d
        for d in cluster.deliveries()
        if d["host"] == "h2" and (d["lease"], d["epoch"]) in held and d["t"] >= resumed_ns
    ]
    assert not late, f"h2 delivered {len(late)} events of leases it had lost"
    stopped = {
        (e["lease"], e["epoch"]): e["reason"]
        for e in cluster.log_events("h2")
        if e.get("event") == "worker.stopped"
    }
    assert all(stopped.get(key) == "lease_lost" for key in held), stopped
    check_complete(cluster, feed, table, exactly_once=False)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
async def test_blobs_moving_shards_stay_in_order_with_slow_and_fast_leases(
    cluster: Cluster, table: Table, feed: Feed, ordered: bool
) -> None:
    cluster.env.update(
        CFP_TEST_BATCH_DELAY_S="0",
        CFP_TEST_SLOW_LEASES="00,02,04,06,08",
        CFP_TEST_SLOW_DELAY_S="0.3",
    )
    extra = () if ordered else ("--unordered",)
    for name in ("h1", "h2", "h3"):
        cluster.start(name, "--until-caught-up", *extra, skew_s=SKEWS[name])
    codes = [await asyncio.to_thread(cluster.wait, n) for n in ("h1", "h2", "h3")]
    assert codes == [0, 0, 0]
    assert all_caught_up(await table.leases())
    violations = order_violations(cluster.deliveries(), feed.order)
    if ordered:
        check_complete(cluster, feed, table, exactly_once=True)
    else:  # the check above has teeth: without the barrier, moved blobs come out of order
        assert violations


@pytest.mark.parametrize("policy", ["retry", "stop"])
async def test_an_observer_that_keeps_failing_checkpoints_nothing(
    cluster: Cluster, table: Table, policy: str
) -> None:
    cluster.args = (*ARGS[:-1], "tests.plugins:FailingObserver")
    cluster.start("h1", "--on-observer-error", policy, "--observer-attempts", "2")
    deadline = patience.deadline()
    if policy == "stop":  # the 6 leases of segment 1 park in front of their first batch
        while len(parked := [r for r in await table.leases() if r.parked]) < 6:
            assert time.monotonic() < deadline, "the leases did not park"
            await asyncio.sleep(0.2)
        rows = await table.leases()
        assert len(parked) == 6 and all("refusing" in r.error and not r.owner for r in parked)
    else:  # retried for ever (past --observer-attempts), and SIGTERM still stops the host
        while sum(e.get("event") == "observer.retry" for e in cluster.log_events("h1")) < 20:
            assert time.monotonic() < deadline, "no retries"
            await asyncio.sleep(0.2)
        rows = await table.leases()
        assert not any(r.parked for r in rows)
    assert rows and all(r.continuation is None or '"shard"' not in r.continuation for r in rows), (
        "a batch the observer refused was checkpointed"
    )
    assert cluster.stop_all() == {"h1": 0}


@pytest.mark.parametrize("start", ["2026-01-01T02:30:00Z", "now"])
async def test_start_options_apply_to_new_leases(
    cluster: Cluster, table: Table, feed: Feed, start: str
) -> None:
    option = ("--start-from-now",) if start == "now" else ("--start-time", start)
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    cluster.start("h1", "--until-caught-up", *option)
    assert await asyncio.to_thread(cluster.wait, "h1") == 0
    got = cluster.delivered()
    if start == "now":
        assert not got  # the whole feed lies in the past
        return
    cut = datetime.fromisoformat(start)
    records, _ = await read_all(feed.conn)
    expected = {str(r["id"]) for r in records if parse_event_time(str(r["eventTime"])) >= cut}
    assert 0 < len(expected) < len(feed.ids)
    assert set(got) == expected


async def test_status_shows_owners_positions_and_what_is_left(
    cluster: Cluster, table: Table, feed: Feed
) -> None:
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0.5"
    cluster.start("h1")
    await table.until(lambda rows: len(rows) == 9 and all(r.owner for r in rows), what="owned")
    busy = cluster.status()["leases"]
    assert {r["owner"] for r in busy} == {"h1"}
    assert sum(r["bytesLeft"] for r in busy) > 0
    assert cluster.stop_all() == {"h1": 0}
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    cluster.start("h2", "--until-caught-up")
    assert await asyncio.to_thread(cluster.wait, "h2") == 0
    done = cluster.status()["leases"]
    assert len(done) == 9
    for row in done:
        assert row["owner"] is None and row["caughtUp"] and row["bytesLeft"] == 0
        assert row["segmentDone"] and row["lastCheckpoint"] and row["epoch"] >= 1
    table_text = cluster.cfp("status")
    assert table_text.returncode == 0 and "caught up" in table_text.stdout
