r"""A host's lifecycle: the states `/status`, `/readyz` and `cfp status` report, and the moves
between them.

```
not started -> starting -> running <-> failed          (the lease store unreachable a while)
                              ^  |
                              +--+-> paused               (cfp pause / cfp resume)
                  |           |  \
                  |           |   -> draining -> stopped  (SIGTERM, caught up)
                  |           \-> failed permanently      (an error retrying cannot fix)
                  \-> failed permanently | draining
```

`paused`: the processor is paused (`cfp pause`): the host holds its leases idle, renewing them,
until `cfp resume`.

The table of allowed moves is data, checked by `may_move`; `Lifecycle` applies it and remembers
when each state began.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("cfp.host")


class HostState(enum.StrEnum):
    NOT_STARTED = "not started"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    PAUSED = "paused"
    FAILED = "failed"  # still trying: the lease store has not answered for a while
    FAILED_PERMANENTLY = "failed permanently"  # the host stops (its container restarts it)
    STOPPED = "stopped"  # drained and released every lease

    @property
    def is_final(self) -> bool:
        return self in (HostState.STOPPED, HostState.FAILED_PERMANENTLY)


_S = HostState
MOVES: dict[HostState, frozenset[HostState]] = {
    _S.NOT_STARTED: frozenset({_S.STARTING, _S.FAILED_PERMANENTLY}),
    _S.STARTING: frozenset({_S.RUNNING, _S.PAUSED, _S.DRAINING, _S.FAILED, _S.FAILED_PERMANENTLY}),
    _S.RUNNING: frozenset({_S.DRAINING, _S.PAUSED, _S.FAILED, _S.FAILED_PERMANENTLY}),
    _S.PAUSED: frozenset({_S.RUNNING, _S.DRAINING, _S.FAILED, _S.FAILED_PERMANENTLY}),
    _S.FAILED: frozenset({_S.RUNNING, _S.PAUSED, _S.DRAINING, _S.FAILED_PERMANENTLY}),
    _S.DRAINING: frozenset({_S.STOPPED, _S.FAILED_PERMANENTLY}),
    _S.STOPPED: frozenset(),
    _S.FAILED_PERMANENTLY: frozenset(),
}


def may_move(current: HostState, to: HostState) -> bool:
    """Whether a host in `current` may enter `to` (staying where it is always may)."""
    return to == current or to in MOVES[current]


@dataclass(slots=True)
class Lifecycle:
    """The current state, since when (monotonic seconds), and the error that caused it."""

    clock: Callable[[], float]
    state: HostState = HostState.NOT_STARTED
    since: float = 0.0
    error: str = ""
    listeners: list[Callable[[HostState], None]] = field(default_factory=list)

    def move(self, to: HostState, *, error: str = "") -> bool:
        """Enter `to`; False (and nothing changes) when the table does not allow it, for
        example a late "failed" after the host already began draining."""
        if not may_move(self.state, to):
            return False
        changed = to != self.state
        self.state, self.error = to, error
        if changed:
            self.since = self.clock()
            for listener in self.listeners:
                listener(to)
        return True

    def seconds_in_state(self) -> float:
        return self.clock() - self.since


def logged_lifecycle(now: Callable[[], float], record: Callable[[str], None]) -> Lifecycle:
    """A lifecycle on the monotonic clock `now` whose every move is logged and `record`ed (the
    `cfp_host_state` metric)."""
    lifecycle = Lifecycle(clock=now, since=now())

    def changed(state: HostState) -> None:
        record(state.value)
        log.info("host.state", state=state.value, error=lifecycle.error or None)

    lifecycle.listeners.append(changed)
    return lifecycle
