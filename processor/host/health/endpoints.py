"""The host's HTTP endpoints: `/healthz`, `/readyz`, `/metrics`, `/status` (aiohttp).

The server starts before the host opens its lease store and starts Spark, so that probes see
"starting" rather than a refused connection, and stays up while the host drains.

- `/healthz` (liveness): 200 unless the host failed permanently or its balancing loop has not
  completed a tick for `stall_after_s` (a hung loop: restarting the container is the cure).
- `/readyz` (readiness): 200 while running (or paused) with the lease store answering and the
  observer's destination reachable (no `Outage`: a Spark Connect server lost); 503 while
  starting, draining, failed or stopped, or during such an outage (the host keeps its leases,
  and liveness stays 200: a restart would not bring the server back).
- `/metrics`: the host's Prometheus registry (`processor.host.health.host_progress`).
- `/status`: the host's state and each lease it holds, as JSON, secrets masked.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from observers import SinkHealth
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import HostState, Lifecycle
from processor.redact import redact_value


class EndpointError(Exception):
    """The endpoints cannot be served (the port is taken, the address does not exist)."""

    def __init__(self, message: str, *, port_taken: bool) -> None:
        super().__init__(message)
        self.port_taken = port_taken


@dataclass(slots=True)
class HostHealth:
    """What the endpoints read. `loop_age_s` and `store_silent_s` answer None until the host
    runs its loops (during start-up)."""

    host_name: str
    processor: str
    lifecycle: Lifecycle
    progress: HostProgress
    expiry_s: float
    stall_after_s: float
    loop_age_s: Callable[[], float | None] = lambda: None
    store_silent_s: Callable[[], float | None] = lambda: None
    sink: Callable[[], SinkHealth | None] = lambda: None  # the observer's, if it reports one
    extra: dict[str, Any] = field(default_factory=dict)

    def liveness(self) -> tuple[bool, str]:
        state = self.lifecycle.state
        if state is HostState.FAILED_PERMANENTLY:
            return False, f"failed permanently: {self.lifecycle.error}"
        age = self.loop_age_s()
        stalled = age is not None and age > self.stall_after_s
        if state in (HostState.RUNNING, HostState.PAUSED, HostState.FAILED) and stalled:
            return False, f"the balancing loop has not completed a tick for {age:.0f}s"
        return True, state.value

    def freshness(self) -> dict[str, Any]:
        """How old the events were when their observer accepted them, by source (the last
        few thousand of each: percentiles in seconds), and when the last hint came."""
        ages, hints = self.progress.ages, self.progress.hints
        last = hints.last_hint_at
        return {
            "feed": ages.recent("feed"),
            "hint": ages.recent("hint"),
            "lastHintAt": None if last is None else last.isoformat(),
        }

    def readiness(self) -> tuple[bool, str]:
        state = self.lifecycle.state
        if state not in (HostState.RUNNING, HostState.PAUSED):
            return False, state.value
        silent = self.store_silent_s()
        if silent is not None and silent >= self.expiry_s:
            return False, f"the lease store has not answered for {silent:.0f}s"
        if (sink := self.sink()) is not None and sink.outage is not None:
            return False, sink.outage.describe()
        return True, state.value

    def status(self) -> dict[str, Any]:
        life, leases = self.lifecycle, self.progress.leases
        lag_bytes, lag_events = leases.lag()
        doc = {
            "host": self.host_name,
            "processor": self.processor,
            "state": life.state.value,
            "stateSeconds": round(life.seconds_in_state(), 3),
            "error": life.error or None,
            "storeSilentSeconds": _rounded(self.store_silent_s()),
            "loopAgeSeconds": _rounded(self.loop_age_s()),
            "events": leases.total_events,
            "lagBytes": lag_bytes,
            "lagEvents": lag_events,
            "leases": leases.to_json(),
            "freshness": self.freshness(),
            **self.extra,
            **_sink_doc(self.sink()),
        }
        return dict(redact_value(doc))


def _sink_doc(sink: SinkHealth | None) -> dict[str, Any]:
    """The observer's health in `/status`: `outage` (its text, or None) and `sink` (whether
    its destination answers, since when not, and the figures it gives)."""
    if sink is None:
        return {}
    outage = sink.outage
    return {
        "outage": outage.describe() if outage else None,
        "sink": {
            "available": outage is None,
            "unavailableSince": outage.since.isoformat() if outage else None,
            "reason": outage.reason if outage else None,
            **sink.details,
            **(
                {
                    "provisionalRows": sink.unconfirmed.provisional,
                    "unconfirmedHints": sink.unconfirmed.overdue,
                }
                if sink.unconfirmed is not None
                else {}
            ),
        },
    }


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _json(doc: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc, option=orjson.OPT_INDENT_2),
        status=status,
        content_type="application/json",
    )


def make_app(health: HostHealth) -> web.Application:
    def _probe(ok: bool, why: str) -> web.Response:
        doc = {"ok": ok, "state": health.lifecycle.state.value, "reason": why}
        return _json(dict(redact_value(doc)), status=200 if ok else 503)

    async def healthz(_: web.Request) -> web.Response:
        ok, why = health.liveness()
        return _probe(ok, why)

    async def readyz(_: web.Request) -> web.Response:
        ok, why = health.readiness()
        return _probe(ok, why)

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(health.progress.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def status(_: web.Request) -> web.Response:
        return _json(health.status())

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/status", status)
    return app


@contextlib.asynccontextmanager
async def serve(health: HostHealth, *, host: str, port: int) -> AsyncIterator[int]:
    """Serve the endpoints on `host:port` (port 0: any free port) and yield the bound port.

    Raises:
        EndpointError: the address cannot be bound; the message names it and the flags.
    """
    runner = web.AppRunner(make_app(health), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        taken = e.errno == errno.EADDRINUSE
        why = "the port is in use" if taken else e.strerror or str(e)
        raise EndpointError(
            f"cannot serve the HTTP endpoints on {host}:{port}: {why} "
            "(set --http-port / CFP_HTTP_PORT, 0 for any free port, or --no-http)",
            port_taken=taken,
        ) from None
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    try:
        yield bound
    finally:
        await runner.cleanup()
