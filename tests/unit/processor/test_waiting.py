"""Waiting for the first of several events, or a deadline."""

from __future__ import annotations

import asyncio

from processor.waiting import running_event, wait_any


async def test_an_event_set_meanwhile_ends_the_wait_and_its_helpers() -> None:
    a, b = asyncio.Event(), asyncio.Event()
    waiting = asyncio.create_task(wait_any(a, b, timeout_s=None))
    await asyncio.sleep(0)
    assert not waiting.done()
    before = len(asyncio.all_tasks())
    b.set()
    assert await waiting is True
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) < before  # the helper waiting on `a` is gone too


async def test_an_event_set_already_or_a_spent_deadline_answers_at_once() -> None:
    event = running_event()
    # spent deadlines are the case under test: nothing is waited for
    assert await wait_any(event, asyncio.Event(), timeout_s=0) is True  # fixed on purpose: spent
    assert await wait_any(asyncio.Event(), timeout_s=0) is False  # fixed on purpose: spent
    assert await wait_any(asyncio.Event(), timeout_s=-1) is False  # fixed on purpose: spent


async def test_a_deadline_passing_answers_false() -> None:
    # a deadline that passes is the case under test: the shortest there is
    assert await wait_any(asyncio.Event(), timeout_s=0.001) is False  # fixed on purpose: it passes
