"""Taking a singleton job's lease: created once, taken when free, ours from before or expired on
this host's own clock, never from a live holder unless the caller judged it gone."""

from __future__ import annotations

from leases import ExpiryTracker, HostId, LeaseToken, MemoryLeaseStore, job_token
from processor.host.leasing.taking import take_job_lease

ME, OTHER = HostId("h1"), HostId("h2")
EXPIRY_S = 30.0
TOKEN: LeaseToken = job_token("state")


async def test_the_first_look_creates_the_row_and_takes_it() -> None:
    store = MemoryLeaseStore()
    got, seen = await take_job_lease(store, TOKEN, ME, tracker=ExpiryTracker(EXPIRY_S), now=0)
    assert got is not None and got.owner == ME and got.epoch == 1
    assert seen is not None and seen.owner is None


async def test_a_live_holder_keeps_it_until_it_expires_on_this_hosts_clock() -> None:
    store = MemoryLeaseStore()
    await take_job_lease(store, TOKEN, OTHER, tracker=ExpiryTracker(EXPIRY_S), now=0)
    mine = ExpiryTracker(EXPIRY_S)
    got, seen = await take_job_lease(store, TOKEN, ME, tracker=mine, now=0)
    assert got is None and seen is not None and seen.owner == OTHER
    got, _ = await take_job_lease(store, TOKEN, ME, tracker=mine, now=EXPIRY_S - 1)
    assert got is None  # the row did not change, but it has not been silent long enough
    got, _ = await take_job_lease(store, TOKEN, ME, tracker=mine, now=EXPIRY_S + 1)
    assert got is not None and got.owner == ME and got.epoch == 2


async def test_force_takes_it_from_a_holder_the_caller_judged_gone() -> None:
    store = MemoryLeaseStore()
    await take_job_lease(store, TOKEN, OTHER, tracker=ExpiryTracker(EXPIRY_S), now=0)
    got, _ = await take_job_lease(
        store, TOKEN, ME, tracker=ExpiryTracker(EXPIRY_S), now=0, force=True
    )
    assert got is not None and got.owner == ME
