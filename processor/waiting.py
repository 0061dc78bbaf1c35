"""Waiting for the first of several events, or a deadline: how every host loop sleeps."""

from __future__ import annotations

import asyncio


async def wait_any(*events: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until one of `events` is set or `timeout_s` passes; True when an event was set.

    Cancellation: the helper tasks live only inside this call and are cancelled on the way out.
    """
    if any(e.is_set() for e in events):
        return True
    if timeout_s is not None and timeout_s <= 0:
        return False
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        return bool(done)
    finally:
        for w in waiters:
            w.cancel()


def running_event() -> asyncio.Event:
    """An event that starts set (a processor runs until a balancing tick finds it paused)."""
    event = asyncio.Event()
    event.set()
    return event
