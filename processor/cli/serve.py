"""What `cfp run` does once its options are checked: serve the endpoints, open the host, run it
until it stops, and turn how it ended into an exit code. Imported when `cfp run` runs (it loads
the host, aiohttp and the Azure SDKs)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import structlog

from leases import LeaseError
from observers import PluginLoadError
from processor.changefeed.change_filter import FilterError
from processor.changefeed.errors import FeedError
from processor.cli.common import say_error, unless_decoder_stuck
from processor.clock import SystemClock
from processor.host.config import HostConfig
from processor.host.endpoints import EndpointError, HostHealth, serve
from processor.host.host import Host, host_lifecycle, open_host
from processor.host.lifecycle import HostState
from processor.host.progress import HostProgress

# /healthz fails when no balancing tick completed for this long (ticks, at least this many s)
STALL_AFTER_TICKS = 10
STALL_AFTER_MIN_S = 120.0

log = structlog.get_logger("cfp.run")


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    strict: bool  # asked for explicitly: a taken port is an error, not a reason to pick another


async def serve_host(
    config: HostConfig, clock: SystemClock, endpoint: Endpoint | None, stop: asyncio.Event
) -> int:
    """Serve the endpoints (when asked), open the host and run it; the exit code."""
    timings = config.timings
    progress = HostProgress(wall=clock.wall, stuck_after_s=config.stuck_after_s)
    lifecycle = host_lifecycle(clock, progress)
    health = HostHealth(
        host_name=config.host_name,
        processor=config.processor_name,
        lifecycle=lifecycle,
        progress=progress,
        expiry_s=timings.expiry_s,
        stall_after_s=max(STALL_AFTER_MIN_S, STALL_AFTER_TICKS * timings.acquire_every_s),
        extra={"leaseTable": config.lease_table, "observer": config.observer.spec},
    )
    async with contextlib.AsyncExitStack() as stack:
        url = ""
        if endpoint is not None:
            try:
                url = await _serve(stack, health, endpoint)
            except EndpointError as e:
                say_error(e)
                return 2
        lifecycle.move(HostState.STARTING)
        try:
            host, store, storage = await open_host(
                config, clock=clock, lifecycle=lifecycle, progress=progress
            )
        except (LeaseError, PluginLoadError, FilterError) as e:  # FilterError: IdentityMismatch
            lifecycle.move(HostState.FAILED_PERMANENTLY, error=str(e))
            say_error(e)
            return 2
        health.loop_age_s = lambda: (
            None if host.last_tick_at is None else clock.monotonic() - host.last_tick_at
        )
        health.store_silent_s = host.store_silent_s
        host.presence.endpoint = url
        try:
            return await _run(host, config, stop)
        finally:
            await store.close()
            await storage.close()


async def _serve(stack: contextlib.AsyncExitStack, health: HostHealth, endpoint: Endpoint) -> str:
    """Start the endpoints; their URL. The default port gives way to a free one when taken.
    Errors: `EndpointError` for a port asked for explicitly, or any other failure."""
    address = endpoint.host
    try:
        port = await stack.enter_async_context(serve(health, host=address, port=endpoint.port))
    except EndpointError as e:
        if endpoint.strict or not e.port_taken:
            raise
        port = await stack.enter_async_context(serve(health, host=address, port=0))
        log.warning("http.default_port_taken", wanted=endpoint.port, port=port)
    url = f"http://{address}:{port}"
    log.info("http.listening", url=url, port=port)
    return url


async def _run(host: Host, config: HostConfig, stop: asyncio.Event) -> int:
    """Run the host until it stops; 0, or 1 for leases left parked or failures of the store or
    the feed, 2 for an observer that could not open, 3 when a native decode got stuck (the
    host stops at once: it takes no more work, releases its leases and leaves, to be restarted
    without the thread the call holds). A bug raises (its traceback shows)."""
    return await unless_decoder_stuck(_host_status(host, config, stop), host.stop)


async def _host_status(host: Host, config: HostConfig, stop: asyncio.Event) -> int:
    try:
        await host.run(stop)
    except Exception as e:
        leaves = _leaves(e)
        for leaf in leaves:
            say_error(leaf)
        if not all(isinstance(leaf, LeaseError | FeedError | PluginLoadError) for leaf in leaves):
            raise
        # an observer that could not open (the Spark observer's output): configuration
        return 2 if all(isinstance(leaf, PluginLoadError) for leaf in leaves) else 1
    if config.until_caught_up and host.balancer.parked:
        for lease in host.balancer.parked:
            say_error(f"lease {lease.token} is parked: {lease.error}")
        return 1
    return 0


def _leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, or `e` itself."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for inner in e.exceptions for leaf in _leaves(inner)]
    return [e]
