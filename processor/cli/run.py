"""`cfp run`: one host, from its options (run_options.py, host_settings.py). The host, aiohttp
and the Azure SDKs load only when it runs (serve.py), so that `cfp run --help` answers at
once."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from processor import connection, faults
from processor.cli.common import SectionedCommand, fail, options, run_async
from processor.cli.host_settings import RunOptions, host_config
from processor.cli.run_options import (
    FAILURES_OPTIONS,
    FILTER_OPTIONS,
    HTTP_OPTIONS,
    OBSERVER_OPTIONS,
    START_OPTIONS,
    TIMINGS_OPTIONS,
    WHERE_OPTIONS,
)
from processor.clock import SystemClock
from processor.host.config import default_host_name
from processor.runtime import tune_gc, tune_memory

RUN_SECTIONS: dict[str, tuple[str, ...]] = {
    "Connection and identity": (
        "connection_string", "lease_connection_string", "lease_table", "processor_name",
        "host_name",
    ),
    "Leases and timing": (
        "lease_expiration", "renew_interval", "acquire_interval", "lease_partitions",
        "balance_by", "load_tolerance",
    ),
    "Reading and filters": (
        "poll_interval", "decode_deadline", "max_batch_events", "containers", "blob_prefix",
        "event_types", "blob_types", "start_time", "start_from_now", "end_time", "initial_scan",
        "scan_partitions", "until_caught_up", "unordered",
    ),
    "Delivery": (
        "observer", "output_format", "on_observer_error", "on_gap", "observer_attempts",
        "dead_letter_dir", "stuck_after",
    ),
    "Spark (--observer spark)": (
        "output", "output_connection_string", "spark_master", "spark_remote", "spark_conf_pairs",
        "state_interval", "spark_max_rows", "spark_max_wait", "spark_warm_up_rows",
    ),
    "Endpoints": ("http_on", "http_host", "http_port"),
}  # fmt: skip
"""`cfp run --help`'s sections, by concern (tests/unit/processor/cli: each option in one)."""


@click.command("run", cls=SectionedCommand, sections=RUN_SECTIONS)
@options(*WHERE_OPTIONS, *OBSERVER_OPTIONS, *FAILURES_OPTIONS)
@options(*TIMINGS_OPTIONS, *FILTER_OPTIONS, *START_OPTIONS, *HTTP_OPTIONS)
def run_command(**params: Any) -> None:
    """Run one host: take a fair share of the processor's leases and process their shards.

    Stops gracefully on SIGTERM or SIGINT: finishes the batches in hand, checkpoints, and
    releases every lease (keeping its continuation) before exiting 0.
    """
    o = RunOptions(**params)
    clock = SystemClock(faults.clock_skew_s())
    try:
        conn = connection.resolve(o.connection_string)
        config = host_config(o, conn=conn, now=clock.wall(), default_host=default_host_name())
    except ValueError as e:  # ConfigError, or a malformed connection string
        fail(str(e), 2)
    tune_gc()
    tune_memory()
    from processor.changefeed.columnar import NATIVE  # noqa: PLC0415 - the heavy part
    from processor.cli.serve import Endpoint, serve_host  # noqa: PLC0415

    NATIVE.deadline_s = o.decode_deadline
    # the default port gives way to a free one when taken (several hosts on one machine); a port
    # asked for by flag or variable does not
    source = click.get_current_context().get_parameter_source("http_port")
    strict = source is not ParameterSource.DEFAULT
    endpoint = Endpoint(o.http_host, o.http_port, strict=strict) if o.http_on else None
    raise SystemExit(run_async(lambda stop: serve_host(config, clock, endpoint, stop)))
