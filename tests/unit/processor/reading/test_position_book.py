"""Every lease's position, as the segment barrier reads it."""

from __future__ import annotations

from leases import Lease
from processor.reading.position_book import PositionBook
from tests.unit.fakes import ManualClock


async def test_the_barrier_book_lists_the_table_at_most_once_per_refresh_interval() -> None:
    listed: list[float] = []
    clock = ManualClock()

    async def lister() -> list[Lease]:
        listed.append(clock.now)
        return []

    book = PositionBook(lister, refresh_s=1.0, clock=clock)
    await book.refresh()
    await book.refresh()  # within the interval: the host's last listing stands
    clock.now += 1.0
    await book.refresh()
    assert listed == [100.0, 101.0]
