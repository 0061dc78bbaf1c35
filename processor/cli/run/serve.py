"""What `cfp run` does once its options are checked: serve the endpoints, open the host, run it
until it stops, and turn how it ended into an exit code. Imported when `cfp run` runs (it loads
the host, aiohttp and the Azure SDKs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass

import structlog

from leases import LeaseError
from observers import PluginLoadError
from processor.changefeed.change_filter import FilterError
from processor.changefeed.errors import FeedError
from processor.cli.common import say_error, unless_decoder_stuck
from processor.clock import SystemClock
from processor.host.assembly import assemble
from processor.host.health.endpoints import EndpointError, HostHealth, serve
from processor.host.health.lifecycle import HostState
from processor.host.host import Host
from processor.host.host_config import HostConfig

log = structlog.get_logger("cfp.run")


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    strict: bool  # asked for explicitly: a taken port is an error, not a reason to pick another


async def serve_host(
    config: HostConfig, clock: SystemClock, endpoint: Endpoint | None, stop: asyncio.Event
) -> int:
    """Assemble the host, serve its endpoints (when asked), open it and run it; the exit
    code."""
    try:
        parts = assemble(config, clock)
    except PluginLoadError as e:
        say_error(e)
        return 2
    host = parts.host
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(parts.close)
        url = ""
        if endpoint is not None:
            try:
                url = await _serve(stack, host.health(), endpoint)
            except EndpointError as e:
                say_error(e)
                return 2
        host.lifecycle.move(HostState.STARTING)
        try:
            await parts.open()
        except (LeaseError, FilterError) as e:  # FilterError: IdentityMismatch
            host.lifecycle.move(HostState.FAILED_PERMANENTLY, error=str(e))
            say_error(e)
            return 2
        return await _run(host, config, stop, url)


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


async def _run(host: Host, config: HostConfig, stop: asyncio.Event, url: str) -> int:
    """Run the host until it stops; 0, or 1 for leases left parked or failures of the store or
    the feed, 2 for an observer that could not open, 3 when a native decode got stuck (the
    host stops at once: it takes no more work, releases its leases and leaves, to be restarted
    without the thread the call holds). A bug raises (its traceback shows)."""
    return await unless_decoder_stuck(_host_status(host, config, stop, url), host.stop)


async def _host_status(host: Host, config: HostConfig, stop: asyncio.Event, url: str) -> int:
    try:
        await host.run(stop, endpoint=url)
        if host.drain.cut:  # threads still in Spark calls: the interpreter would wait for them
            log.warning("host.drain_cut", left_behind=host.drain.cut, seconds=host.drain.seconds)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    except Exception as e:
        leaves = _leaves(e)
        for leaf in leaves:
            say_error(leaf)
        if not all(isinstance(leaf, LeaseError | FeedError | PluginLoadError) for leaf in leaves):
            raise
        # an observer that could not open (the Spark observer's output): configuration
        return 2 if all(isinstance(leaf, PluginLoadError) for leaf in leaves) else 1
    if config.until_caught_up and (parked := host.parked()):
        for lease in parked:
            say_error(f"lease {lease.token} is parked: {lease.error}")
        return 1
    return 0


def _leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, or `e` itself."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for inner in e.exceptions for leaf in _leaves(inner)]
    return [e]
