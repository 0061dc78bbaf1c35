"""What Spark itself wrote, as the cluster tests read it. The event log: which host ran each
task, which executors were lost; the Connect server writes it (spark.eventLog.*) as one plain
JSON-lines file per application. It is buffered, so which tasks run *now* comes from the
executors' own logs in a worker's work folder, written line by line."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# what the server needs to write a log these functions can read
EVENT_LOG_CONF = {
    "spark.eventLog.enabled": "true",
    "spark.eventLog.compress": "false",
    "spark.eventLog.rolling.enabled": "false",
}


@dataclass(frozen=True)
class Task:
    id: int
    stage: int
    partition: int
    host: str
    executor: str
    reason: str | None  # None: still running; "Success", "ExecutorLostFailure", ...


def read(folder: Path) -> list[dict[str, Any]]:
    """Every event of every application logged in `folder` (a line being written is left)."""
    events = []
    for path in sorted(folder.glob("app-*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def tasks(events: list[dict[str, Any]]) -> list[Task]:
    """Each task attempt, with how it ended."""
    started: dict[int, Task] = {}
    for e in events:
        kind = e.get("Event")
        if kind not in ("SparkListenerTaskStart", "SparkListenerTaskEnd"):
            continue
        info = e["Task Info"]
        reason = e["Task End Reason"]["Reason"] if kind == "SparkListenerTaskEnd" else None
        started[info["Task ID"]] = Task(
            id=info["Task ID"],
            stage=e["Stage ID"],
            partition=info.get("Partition ID", info["Index"]),
            host=info["Host"],
            executor=info["Executor ID"],
            reason=reason,
        )
    return list(started.values())


def succeeded_per_host(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(t.host for t in tasks(events) if t.reason == "Success")


_TASK = re.compile(r"Executor: (Running|Finished) task \S+ in stage \S+ \(TID (\d+)\)")


def running_in(work: Path) -> int:
    """How many tasks the executors under a worker's work folder run now."""
    running: set[str] = set()
    for log in work.glob("app-*/*/stderr"):
        for what, tid in _TASK.findall(log.read_text(encoding="utf-8", errors="replace")):
            (running.add if what == "Running" else running.discard)(tid)
    return len(running)


def executors_removed(events: list[dict[str, Any]]) -> dict[str, str]:
    """Executor id: why it was removed."""
    return {
        e["Executor ID"]: str(e.get("Removed Reason", ""))
        for e in events
        if e.get("Event") == "SparkListenerExecutorRemoved"
    }


def executor_hosts(events: list[dict[str, Any]]) -> dict[str, str]:
    return {
        e["Executor ID"]: e["Executor Info"]["Host"]
        for e in events
        if e.get("Event") == "SparkListenerExecutorAdded"
    }
