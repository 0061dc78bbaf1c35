"""The host's health as its balancing ticks report it."""

from __future__ import annotations

from leases import HostId
from processor.host.balancing.balancer import TickReport
from processor.host.balancing.tick_watch import TickWatch, store_health
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import HostState, Lifecycle
from processor.host.health.presence import Presence
from tests.unit.fakes import ManualClock


def test_a_tick_stuck_on_the_feed_does_not_count_as_the_store_answering() -> None:
    """The listing answered at 10 s; the feed then failed until 15 s (connections dropped): the
    store has been silent for 5 s, more than the 3 s expiry."""
    ok_at, failure = store_health(
        now=15.0, ok_at=9.0, answered_at=10.0, store_error=None, expiry_s=3.0
    )
    assert ok_at == 10.0 and failure == "the lease store has not answered for 5.0 s"
    ok_at, failure = store_health(
        now=12.0, ok_at=9.0, answered_at=12.0, store_error=None, expiry_s=3.0
    )
    assert (ok_at, failure) == (12.0, None)
    ok_at, failure = store_health(
        now=13.0, ok_at=9.0, answered_at=12.0, store_error="listing: reset", expiry_s=3.0
    )
    assert (ok_at, failure) == (9.0, "listing: reset")  # a failed listing is not an answer


def report(*, went_through: bool = True, error: str | None = None, paused: bool = False,
           answered_at: float | None = 100.0) -> TickReport:  # fmt: skip
    return TickReport(went_through, error, answered_at, paused, (), "")


class Rows:
    async def publish_host(self, report: object) -> None: ...


def test_the_host_runs_after_its_first_tick_fails_when_the_store_stays_silent() -> None:
    clock = ManualClock()
    life = Lifecycle(clock=clock.monotonic, state=HostState.STARTING)
    presence = Presence(Rows(), name=HostId("h"), lifecycle=life,  # type: ignore[arg-type]
                        leases=HostProgress().leases, clock=clock, expiry_s=3.0)  # fmt: skip
    watch = TickWatch(life, presence, clock, expiry_s=3.0)
    watch(report(went_through=False, answered_at=None, error="listing: refused"))
    assert life.state is HostState.STARTING and not watch.ready.is_set()
    watch(report(paused=True))
    assert watch.ready.is_set() and life.state is HostState.PAUSED
    watch(report())
    assert life.state is HostState.RUNNING and watch.loop_age_s() == 0
    clock.now += 3.0
    watch(report(error="listing: reset", answered_at=None))
    assert life.state is HostState.FAILED and life.error == "listing: reset"
    assert watch.store_silent_s() == 3.0
