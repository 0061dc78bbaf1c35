"""How long a stopping host still waits for its observers and jobs."""

from __future__ import annotations

import asyncio

from processor.host.running.drain_budget import DrainBudget
from tests.unit.fakes import ManualClock


async def test_before_a_stop_signal_waits_are_not_bounded() -> None:
    clock = ManualClock()
    drain = DrainBudget(5.0, clock.monotonic)
    assert drain.left_s() is None
    assert await drain.within("close", asyncio.sleep(0, result="closed")) == "closed"
    assert drain.cut == []


async def test_the_budget_counts_from_the_first_stop_signal() -> None:
    clock = ManualClock()
    drain = DrainBudget(5.0, clock.monotonic)
    drain.begin()
    clock.now += 2
    drain.begin()  # a second signal does not extend it
    assert drain.left_s() == 3.0
    clock.now += 10
    assert drain.left_s() == 0.0


async def test_what_outlasts_the_budget_is_cut_and_cancelled() -> None:
    drain = DrainBudget(0.001, asyncio.get_running_loop().time)
    drain.begin()
    never = asyncio.get_running_loop().create_future()
    assert await drain.within("lease 00", never) is None
    assert never.cancelled() and drain.cut == ["lease 00"]


async def test_a_spent_budget_does_not_even_begin_a_wait() -> None:
    clock = ManualClock()
    drain = DrainBudget(0.0, clock.monotonic)
    drain.begin()
    began: list[bool] = []

    async def close() -> str:
        began.append(True)
        return "closed"

    assert await drain.within("the state job's last run", close()) is None
    assert began == [] and drain.cut == ["the state job's last run"]
