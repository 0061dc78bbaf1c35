"""How long a test may wait for something: until shortly before its own timeout, never a fixed
number of seconds.

A machine busy with other work makes every step of a test slower, hosts, JVMs and Azurite alike,
so a wait with a limit of its own ("the leases move within 30 s", "`cfp sql` ends within 120 s")
is a wall-clock assertion in disguise, and fails on a busy laptop. Each test has one bound, its
pytest timeout (`pytest.mark.timeout`, 300 s unless a module says otherwise). Every wait in the
tests (`until`, `Table.until`, `Cluster.logged`, a host's or a command's exit) lasts until
`REPORT_S` before that bound: what it waited for then fails the test by name, and the rest is
left for the failure's report (where each host waited) and the fixtures' teardown.

Outside a test (a benchmark or the chaos runner uses the same helpers), waits last `OUTSIDE_S`.
"""

from __future__ import annotations

import time

REPORT_S = 20.0  # kept back from the test's timeout for the report of what it waited for
OUTSIDE_S = 600.0  # a wait's bound when no test is running
# monotonic: the running test's timeout, less REPORT_S (none: no test runs)
_running: dict[str, float] = {}


def begin(timeout_s: float | None) -> None:
    """A test starts (setup, call and teardown count, as for pytest-timeout) with `timeout_s`
    (None or 0: none)."""
    _running.clear()
    if timeout_s:
        _running["deadline"] = time.monotonic() + timeout_s - REPORT_S


def deadline() -> float:
    """The monotonic time by which a wait gives up."""
    return _running.get("deadline", time.monotonic() + OUTSIDE_S)


def left_s() -> float:
    """Seconds a wait may still last (at least one: a wait begun late still looks once)."""
    return max(1.0, deadline() - time.monotonic())
