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
