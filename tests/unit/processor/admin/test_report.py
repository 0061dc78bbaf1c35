"""`cfp status`'s numbers, from the lease rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leases import LeaseToken

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_status_estimates_events_left_and_time_lag_from_the_lease_row() -> None:
    from leases import Lease
    from processor.admin.report import LeaseStatus, render_totals

    lease = Lease(
        LeaseToken("00"), events=100, event_bytes=50_000, last_event_time=T0 - timedelta(hours=2)
    )
    row = LeaseStatus(lease, None, 10_000)
    assert row.events_left() == 20  # 10,000 bytes at 500 bytes per event
    assert row.lag_seconds(T0) == 7200
    done = LeaseStatus(Lease(LeaseToken("01"), caught_up=True), None, 0)
    assert done.events_left() is None and done.lag_seconds(T0) == 0
    unknown = LeaseStatus(Lease(LeaseToken("02")), None, None)
    assert unknown.lag_seconds(T0) is None
    scan = LeaseStatus(Lease(LeaseToken("scan-00"), events=40, event_bytes=0), None, 0)
    assert scan.events_left() is None  # backfill events read no feed bytes: no average
    text = render_totals([row, done, unknown], T0)
    assert text == "left up to lastConsumable: 9.8KiB+?, about 20 events; largest time lag 2.0h"


def test_a_host_whose_observer_cannot_write_says_so_in_its_line_and_its_json() -> None:
    from collections import Counter

    from leases import HostId, HostReport
    from leases.store.table_rows import host_from_row, host_row
    from processor.admin.report import host_json, render_hosts

    outage = "spark unavailable since 2026-11-23T11:58:00Z: sc://a:15002: Connection refused"
    report = HostReport(HostId("h1"), "running", T0, T0, 3, 30.0, outage=outage)
    assert host_from_row(host_row("p", report)).outage == outage  # through the lease table
    line = render_hosts([report], T0, Counter({"h1": 3})).splitlines()[1]
    assert line.split()[:2] == ["h1", "running;"] and outage in line
    assert host_json(report, T0, 3)["outage"] == outage
    quiet = HostReport(HostId("h2"), "running", T0, T0, 3, 30.0)
    assert host_json(quiet, T0, 3)["outage"] is None
    assert "unavailable" not in render_hosts([quiet], T0, Counter({"h2": 3}))


def test_a_hosts_event_ages_go_through_its_row_into_its_line_and_its_json() -> None:
    from collections import Counter

    from leases import HostId, HostReport
    from leases.store.table_rows import host_from_row, host_row
    from processor.admin.report import host_json, render_hosts

    ages = {"feed p50": 38.2, "feed p99": 68.0, "hint p50": 0.63, "hint p99": 3.4}
    report = HostReport(HostId("h1"), "running", T0, T0, 3, 30.0, freshness=ages)
    assert host_from_row(host_row("p", report)).freshness == ages
    line = render_hosts([report], T0, Counter({"h1": 3})).splitlines()[1]
    assert "feed 38s/68s hint 0.6s/3.4s" in line
    assert host_json(report, T0, 3)["freshness"] == ages
    feed_only = HostReport(HostId("h2"), "running", T0, T0, 3, 30.0, freshness={
        "feed p50": 2.0, "feed p99": 4.25,
    })  # fmt: skip
    assert "feed 2.0s/4.2s" in render_hosts([feed_only], T0, Counter()) and "hint" not in (
        render_hosts([feed_only], T0, Counter())
    )
    quiet = HostReport(HostId("h3"), "running", T0, T0, 3, 30.0)
    assert host_json(quiet, T0, 3)["freshness"] is None
    assert host_from_row({**host_row("p", quiet), "Freshness": "{not json"}).freshness == {}
