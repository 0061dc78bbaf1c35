"""`cfp run`: one host, from its options (run_options.py, host_settings.py). The host, aiohttp
and the Azure SDKs load only when it runs (serve.py), so that `cfp run --help` answers at
once."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from processor import connection, faults
from processor.cli.common import (
    Options,
    SectionedCommand,
    fail,
    option_names,
    options,
    run_async,
)
from processor.cli.run.hint_options import HINT_OPTIONS
from processor.cli.run.host_settings import host_config
from processor.cli.run.run_options import (
    DELIVERY_OPTIONS,
    HTTP_OPTIONS,
    LEASE_OPTIONS,
    READING_OPTIONS,
    SPARK_OPTIONS,
    WHERE_OPTIONS,
    keep_secrets_out,
    run_options,
)
from processor.clock import SystemClock
from processor.host.host_config import default_host_name
from processor.runtime import keep_pandas_out, tune_gc, tune_memory

RUN_OPTIONS: dict[str, Options] = {
    "Connection and identity": WHERE_OPTIONS,
    "Leases and timing": LEASE_OPTIONS,
    "Reading and filters": READING_OPTIONS,
    "Delivery": DELIVERY_OPTIONS,
    "Hints": HINT_OPTIONS,
    "Spark (--observer spark)": SPARK_OPTIONS,
    "Endpoints": HTTP_OPTIONS,
}
"""`cfp run`'s options by concern: `--help`'s sections, in this order."""
RUN_SECTIONS = {title: option_names(group) for title, group in RUN_OPTIONS.items()}


@click.command("run", cls=SectionedCommand, sections=RUN_SECTIONS)
@options(*(option for group in RUN_OPTIONS.values() for option in group))
def run_command(**params: Any) -> None:
    """Run one host: take a fair share of the processor's leases and process their shards.

    Stops gracefully on SIGTERM or SIGINT: finishes the batches in hand, checkpoints, and
    releases every lease (keeping its continuation) before exiting 0.
    """
    ctx = click.get_current_context()
    given = {ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT}
    o = run_options(params, lambda name: ctx.get_parameter_source(name) in given)
    keep_secrets_out(o)
    clock = SystemClock(faults.clock_skew_s())
    try:
        conn = connection.resolve(o.connection_string)
        config = host_config(o, conn=conn, now=clock.wall(), default_host=default_host_name())
    except ValueError as e:  # ConfigError, or a malformed connection string
        fail(str(e), 2)
    tune_gc()
    tune_memory()
    if o.observer == "log" or o.observer.startswith("jsonl:"):  # no plugin that may want pandas
        keep_pandas_out()
    from processor.changefeed.decoding.columnar import NATIVE  # noqa: PLC0415 - the heavy part
    from processor.cli.run.serve import Endpoint, serve_host  # noqa: PLC0415

    NATIVE.deadline_s = o.decode_deadline
    # the default port gives way to a free one when taken (several hosts on one machine); a port
    # asked for by flag or variable does not
    source = ctx.get_parameter_source("http_port")
    strict = source is not ParameterSource.DEFAULT
    endpoint = Endpoint(o.http_host, o.http_port, strict=strict) if o.http_on else None
    raise SystemExit(run_async(lambda stop: serve_host(config, clock, endpoint, stop)))
