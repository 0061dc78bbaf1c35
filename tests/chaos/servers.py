"""The chaos run's Spark Connect servers, and its `server` faults: a server (or every one) killed
with SIGKILL and started again on its port after a pause; and what the hosts' logs say of how
soon they wrote again."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.chaos.schedule import ALL_SERVERS, Fault, server_index
from tests.connect_servers import ConnectServer


@dataclass
class ServerLoss:
    url: str
    killed_at: datetime
    alone: bool  # another server still answered: its hosts could move to it
    back_at: datetime | None = None  # listening again (None: not restarted before the end)


class ChaosServers:
    def __init__(self, workdir: Path, count: int) -> None:
        self.servers = [ConnectServer(workdir / f"spark-connect-{i}") for i in range(count)]
        self.losses: list[ServerLoss] = []

    @property
    def remotes(self) -> str:
        """`--spark-remote` for the hosts: every server."""
        return ",".join(s.url for s in self.servers)

    def start(self) -> None:
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            server.wait_listening()

    async def fault(self, fault: Fault, note: Callable[[str], None]) -> None:
        """Kill the fault's server(s), wait `length_s`, start them again on their ports."""
        which = server_index(fault, len(self.servers))
        chosen = self.servers if which == ALL_SERVERS else [self.servers[which]]
        down = [s for s in chosen if s.is_running()]
        alone = any(s.is_running() for s in self.servers if s not in down)
        losses = []
        for server in down:
            jvm = await asyncio.to_thread(server.kill)
            losses.append(ServerLoss(server.url, datetime.now(UTC), alone))
            await asyncio.to_thread(server.wait_gone, jvm)  # its JVM went with it
        self.losses += losses
        note(f"killed {', '.join(s.url for s in down) or 'nothing (down already)'}")
        await asyncio.sleep(fault.length_s)
        for server, loss in zip(down, losses, strict=True):
            await asyncio.to_thread(server.start)
            loss.back_at = datetime.now(UTC)
            note(f"{server.url} listening again")

    def stop(self) -> list[str]:
        """Stop every server with SIGTERM; the problems: a non-zero exit, a JVM left behind."""
        problems = []
        for server in self.servers:
            if (rc := server.stop()) != 0:
                problems.append(f"cfp spark-connect at {server.url} exited {rc} on SIGTERM")
            if (jvm := server.jvm()) is not None:
                problems.append(f"the JVM of {server.url} (pid {jvm}) outlived its server")
        return problems

    def report(self, logged: Callable[..., list[dict[str, Any]]]) -> str:
        """How soon the hosts wrote again: after their server listened again (no other server
        answered: they waited for it), and after its loss (one did: they moved to it)."""
        lines = sorted(logged("spark.unavailable", "spark.available", "spark.committed"), key=_at)
        waited, moved = [], []
        for loss in self.losses:
            back, other = _writing_again(lines, loss)
            waited += [back] if back is not None else []
            moved += [other] if other is not None else []
        return (
            f"{len(self.losses)} servers killed; first commit after the server listened again: "
            f"{_spread(waited)}; after moving to another server: {_spread(moved)}"
        )


def _writing_again(
    lines: list[dict[str, Any]], loss: ServerLoss
) -> tuple[float | None, float | None]:
    """Seconds from the server's return to the first commit through it, and from its loss to
    the first commit of a host that moved to another server (None: no such host)."""
    back: float | None = None
    moved: float | None = None
    reopened: dict[str, str] = {}  # host -> the server it opened again after the loss
    for e in lines:
        at, host = _at(e), str(e.get("host"))
        if at < loss.killed_at:
            continue
        if e["event"] == "spark.available":
            reopened[host] = str(e["remote"])
        elif e["event"] != "spark.committed" or host not in reopened:
            continue
        elif loss.alone and reopened[host] != loss.url and moved is None:
            moved = (at - loss.killed_at).total_seconds()
        elif not loss.alone and reopened[host] == loss.url and loss.back_at and back is None:
            back = (at - loss.back_at).total_seconds() if at >= loss.back_at else None
    return back, moved


def _at(e: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(e["timestamp"]).replace("Z", "+00:00"))


def _spread(seconds: list[float]) -> str:
    if not seconds:
        return "none measured"
    return f"median {statistics.median(seconds):.1f}s, max {max(seconds):.1f}s ({len(seconds)})"
