"""Judging expiry by what this host saw, on its own monotonic clock.

A lease is expired when this host has seen no change to it (version, owner, epoch, hand-over
request) for the expiry interval. No other host's wall clock is ever compared with ours, so
skewed clocks cannot expire a live lease (the Kinesis Client Library's rule). The price: a host
that just started waits one expiry interval before it may take a dead host's leases.

A change is seen up to one listing interval after it happened, so waiting for the next regular
listing after that would let a crash go unnoticed for expiry + two intervals. `next_expiry` tells
the caller when to list again instead: then a dead host's leases are taken within expiry + one
interval of its last renewal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from leases.record import HostId, Lease, LeaseToken

_Fingerprint = tuple[int, HostId | None, int, HostId | None, str | None]


@dataclass(frozen=True, slots=True)
class LeaseView:
    """A lease as one host sees it now: the snapshot plus whether it looks abandoned."""

    lease: Lease
    is_expired: bool = False

    @property
    def token(self) -> LeaseToken:
        return self.lease.token

    @property
    def owner(self) -> HostId | None:
        return self.lease.owner

    @property
    def is_live(self) -> bool:
        """Owned by a host that is still writing it."""
        return self.lease.owner is not None and not self.is_expired

    @property
    def bound_for(self) -> HostId | None:
        """The host a live lease will belong to: whoever asked for it, else its owner."""
        asked_by, owner = self.lease.next_owner, self.owner
        return asked_by if asked_by is not None and asked_by != owner else owner


def _fingerprint(lease: Lease) -> _Fingerprint:
    return (lease.version, lease.owner, lease.epoch, lease.next_owner, lease.etag)


class ExpiryTracker:
    """Remembers when each lease last changed, as seen by the caller (the balancer, each tick)."""

    def __init__(self, expiry_s: float) -> None:
        self.expiry_s = expiry_s
        self._seen: dict[LeaseToken, tuple[_Fingerprint, float]] = {}
        self._now = 0.0
        self._listed: set[LeaseToken] | None = None  # what the last partial listing covered

    def observe(
        self, leases: Iterable[Lease], now: float, *, keep_others: bool = False
    ) -> list[LeaseView]:
        """Record a fresh listing made at monotonic time `now` and judge each lease.

        A lease seen for the first time counts as just changed. Leases not in the listing are
        forgotten, unless `keep_others` (a listing of part of the table).
        """
        seen: dict[LeaseToken, tuple[_Fingerprint, float]] = dict(self._seen) if keep_others else {}
        views: list[LeaseView] = []
        for lease in leases:
            mark = _fingerprint(lease)
            before = self._seen.get(lease.token)
            since = before[1] if before is not None and before[0] == mark else now
            seen[lease.token] = (mark, since)
            views.append(LeaseView(lease, is_expired=now - since >= self.expiry_s))
        self._seen = seen
        self._now = now
        self._listed = {lease.token for lease in leases} if keep_others else None
        return views

    def forget(self, tokens: Iterable[LeaseToken]) -> None:
        for token in tokens:
            self._seen.pop(token, None)

    def unchanged_for(self, token: LeaseToken, now: float) -> bool:
        """Whether the lease as last seen was first seen so at least an expiry before `now`."""
        entry = self._seen.get(token)
        return entry is not None and now - entry[1] >= self.expiry_s

    def next_expiry(self, me: HostId) -> float | None:
        """When the first lease not owned by `me` and not yet expired at the last listing would
        expire if nothing changes; None when there is none. After a partial listing, only the
        leases it listed count: the others are not looked at again at the next tick anyway."""
        due = [
            since + self.expiry_s
            for token, (mark, since) in self._seen.items()
            if mark[1] != me
            and since + self.expiry_s > self._now
            and (self._listed is None or token in self._listed)
        ]
        return min(due, default=None)
