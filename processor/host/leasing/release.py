"""Releasing a held lease: the owner's last write, shielded from cancellation and bounded in
time. Every release of a lease a worker or a singleton job holds, a hand-over's too (step 2 of a
steal, stealing.py), goes through `let_go`, so none can hang a stopping host or be cut in half by
it. (A lease acquired that no worker will run is let go at once by the balancer's own tick,
`LeaseTaker`, in taking.py: nothing holds it yet.)

A release keeps the continuation (and any hand-over request). One that the store refuses, or
that does not answer within the time given, leaves the lease to expire: it is never lost, only
taken later.
"""

from __future__ import annotations

import asyncio

from leases import Lease, LeaseTable
from processor.host.leasing.held_lease import HeldLease


async def let_go(
    held: HeldLease, store: LeaseTable, *, timeout_s: float, error: str = "", park: bool = False
) -> Lease | None:
    """Release `held` (or park it, with `error` for the operator), within `timeout_s`. None when
    it was no longer ours. Errors: `LeaseError` from the store, `TimeoutError` past `timeout_s`;
    the write itself runs on, shielded, when the caller is cancelled."""
    async with asyncio.timeout(timeout_s):
        return await asyncio.shield(
            held.write(
                lambda lease: (
                    store.park(lease, error=error) if park else store.release(lease, error=error)
                )
            )
        )
