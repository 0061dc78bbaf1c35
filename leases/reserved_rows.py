"""Rows beside the leases: each host's own report of its state (for `cfp status`), the
processor's row (paused or not, for `cfp pause` / `cfp resume`), the processor's identity (what
it delivers, written once: insert-if-absent, never replaced), and job leases.

A host row is written only by its host (unconditionally: nobody else writes it) and read by
anyone. It lives in the processor's partition under a RowKey starting with `HOST_ROW_PREFIX`.
The processor row is written by operators and read by every host at each balancing tick. A job
lease (`job_token`) is a lease like any other (owner, epoch, continuation, the same conditional
writes) for work that one host of the processor does at a time, such as the Spark observer's
state job. No lease token can start with `~`, so lease listings leave all three out with a key
range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from leases.record import HostId, LeaseToken

HOST_ROW_PREFIX = "~host~"
PROCESSOR_ROW = "~processor"
IDENTITY_ROW = "~identity"  # what the processor delivers, written once when it is created
JOB_ROW_PREFIX = "~job~"
# every lease RowKey sorts before this; every other row at or after it
RESERVED_ROWS_FROM = "~"


def is_reserved(token: str) -> bool:
    """Whether `token` would fall among the rows that are not leases (hosts, jobs, the
    processor's own): no lease may be named so."""
    return token.startswith(RESERVED_ROWS_FROM)


def key_range(prefix: str) -> tuple[str, str]:
    """The RowKeys starting with `prefix`: from it (inclusive) to the next prefix (exclusive)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def job_token(name: str) -> LeaseToken:
    """The lease of the job `name` (one host of the processor at a time runs it)."""
    return LeaseToken(JOB_ROW_PREFIX + name)


def job_name(token: str) -> str:
    return token.removeprefix(JOB_ROW_PREFIX)


@dataclass(frozen=True, slots=True)
class HostReport:
    name: HostId
    state: str  # the host's lifecycle state, as the processor names it
    since: datetime  # when it entered `state` (its own wall clock)
    seen: datetime  # when it wrote this row (its own wall clock)
    leases: int  # leases it works on
    expiry_s: float  # its lease expiry: a row older than this is from a silent host
    error: str = ""
    endpoint: str = ""  # where its HTTP endpoints listen, if anywhere
    stuck: dict[str, str] = field(default_factory=dict)  # lease -> why it is stuck
    note: str = ""  # what it is doing when that is not obvious (why it holds nothing yet)
    outage: str = ""  # what it cannot write to, since when (its Spark Connect server lost)
    # how old its events were when accepted, in seconds, by "SOURCE pNN" ("feed p99", "hint p50")
    freshness: dict[str, float] = field(default_factory=dict)

    def silent_s(self, now: datetime) -> float:
        """Seconds since the row was written (as far as two wall clocks can tell)."""
        return max(0.0, (now - self.seen).total_seconds())


@dataclass(frozen=True, slots=True)
class BalanceNote:
    """How the leases stood at some host's last full listing, left on the processor row for the
    hosts that list only what they watch (`leases.policy.watching`): a host that could act on it
    lists
    everything. Written by any host whose full listing disagrees with it."""

    target: int  # ceil(leases / live hosts)
    most: int  # the most leases a live host holds or was asked to take
    unowned: int  # leases free or expired, parked ones aside


@dataclass(frozen=True, slots=True)
class ProcessorState:
    """The processor-wide switch: paused (hosts hold their leases idle) or not; and the last
    balance note (None when there is none: an operator's write clears it)."""

    paused: bool = False
    since: datetime | None = None  # when it was last paused or resumed (the operator's clock)
    reason: str = ""
    balance: BalanceNote | None = None
