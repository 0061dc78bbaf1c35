"""What one balancing tick reads of the lease table: every lease, or, once this host is settled,
only the slices it watches (`leases/policy/watching.py`); and the view of the table those listings
build between full ones."""

from __future__ import annotations

from dataclasses import dataclass

from leases import BalanceNote, HostId, Lease, LeaseTable, LeaseView
from leases.policy.watching import (
    EVERYTHING,
    KeyRange,
    TableView,
    in_ranges,
    ranges_to_list,
    watch_ranges,
)
from processor.host.health.host_progress import BalancingRecorder


@dataclass(frozen=True, slots=True)
class Listed:
    fresh: list[Lease]  # the rows this tick read
    ranges: list[KeyRange]  # what it read: `[EVERYTHING]` for a full listing
    watched: list[KeyRange]  # the slices this host watches, as its view stood before

    @property
    def is_full(self) -> bool:
        return self.ranges == [EVERYTHING]


class TableListing:
    def __init__(
        self, store: LeaseTable, me: HostId, *, expiry_s: float, counts: BalancingRecorder
    ) -> None:
        self._store, self._me, self._counts = store, me, counts
        self.view = TableView.empty(expiry_s)
        self.ticks = 0
        self.settled = False  # the last tick found nothing to do: the next may list less
        self._full_at_tick: int | None = None  # the tick of the last full listing

    async def read(self, note: BalanceNote | None, *, mine: int, full: bool) -> Listed:
        """This tick's rows: every lease when `full` is asked, when not settled, or at the
        safety net's pace; else the watched slices only. `note`: the balance note of the
        processor row, `mine`: leases this host holds."""
        self.ticks += 1
        watched = watch_ranges(self.view.rows, self.view.hosts(), self._me)
        since_full = None if self._full_at_tick is None else self.ticks - self._full_at_tick
        ranges = ranges_to_list(
            self.view,
            self._me,
            settled=self.settled and not full,
            ticks_since_full=since_full,
            note=note,
            mine=mine,
            watched=watched,
        )
        self.settled = False  # until this tick has gone through and found nothing to do
        if ranges == [EVERYTHING]:
            self._full_at_tick = self.ticks
            self._counts.listings.labels("full").inc()
            return Listed(await self._store.list_leases(), ranges, watched)
        self._counts.listings.labels("watch").inc()
        rows = [x for lo, hi in ranges for x in await self._store.list_range(lo, hi)]
        return Listed(rows, ranges, watched)

    def unlisted(self, listed: Listed) -> list[Lease]:
        """The known rows this tick did not read (outside its ranges), as last listed."""
        return [x for t, x in self.view.rows.items() if not in_ranges(t, listed.ranges)]

    def take_in(
        self, listed: Listed, made: list[Lease], now: float
    ) -> tuple[list[LeaseView], list[LeaseView]]:
        """Update the view with the listing and the rows this tick created; the views of the
        fresh rows, and of every lease known."""
        return self.view.listed([*listed.fresh, *made], now, listed.ranges)

    def next_expiry(self, me: HostId) -> float | None:
        """When the first lease not owned by `me` would expire if nothing changes (None: none
        would), as the view saw the table."""
        return self.view.tracker.next_expiry(me)
