"""A held lease's read rate, as renewals measure and write it for `--balance-by load`."""

from __future__ import annotations

import pytest

from leases import HostId, LeaseToken, MemoryLeaseStore
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.read_rate import ReadRate
from processor.host.leasing.renewer import Renewer
from tests.unit.fakes import ManualClock


def test_a_steady_read_converges_on_its_rate_and_starts_from_the_previous_owners() -> None:
    rate = ReadRate(500.0)
    assert (
        rate.sample(0, 0.0, window_s=60) == 500.0
    )  # the first sample only sets where counting starts
    for second in range(10, 601, 10):
        got = rate.sample(second * 2_000, float(second), window_s=60)
    assert got == pytest.approx(2_000, rel=0.01)


def test_one_burst_moves_the_rate_by_its_share_of_the_window_only() -> None:
    rate = ReadRate(0.0)
    rate.sample(0, 0.0, window_s=60)
    got = rate.sample(100_000, 10.0, window_s=60)  # 10 kB/s for one 10 s interval
    assert 1_000 < got < 2_000  # about 1 - e^(-10/60) of it
    assert rate.sample(100_000, 20.0, window_s=60) < got  # nothing more read: it decays


def test_a_counter_that_went_back_reads_as_nothing_read() -> None:
    rate = ReadRate(100.0)
    rate.sample(5_000, 0.0, window_s=60)
    assert rate.sample(0, 10.0, window_s=60) < 100.0


async def test_renewals_write_each_held_leases_rate_and_a_new_epoch_starts_over() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    token = LeaseToken("00")
    created = await store.create_if_absent(token, None)
    assert created is not None
    got = await store.acquire(created, HostId("a"))
    assert got is not None
    held = HeldLease(got, clock=clock, fence_after_s=30)
    read = {token: 0}
    renewer = Renewer(store, lambda: [held], every_s=10, clock=clock, bytes_read=read.get)
    for _ in range(30):
        clock.now += 10
        read[token] += 50_000  # 5 kB/s
        await renewer.renew_all()
    row = await store.get(token)
    assert row is not None and row.load == pytest.approx(5_000, rel=0.05)
    unknown = Renewer(store, lambda: [held], every_s=10, clock=clock)  # nothing measured
    await unknown.renew_all()
    row = await store.get(token)
    assert row is not None and row.load == pytest.approx(5_000, rel=0.05)
