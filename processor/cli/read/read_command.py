"""`cfp read`: the whole feed (or part of it) as JSON lines, resumable with a continuation token.

A token may be one of ours or an official SDK's (`CursorVersion` 1); `--token-format sdk`
saves SDK tokens, so a read can be handed over to an SDK and back. The read itself is
`read_job.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from processor.changefeed.storage.layout import DEFAULT_READ_SIZE
from processor.cli.common import (
    ByteSize,
    IsoTime,
    connection_option,
    decode_deadline_option,
    filter_options,
    format_option,
    options,
    run_async,
)
from processor.runtime import keep_pandas_out, tune_gc, tune_memory


@click.command("read")
@connection_option
@click.option("--start-time", type=IsoTime(), help="Only events at or after this time.")
@click.option("--end-time", type=IsoTime(), help="Only events before this time.")
@options(*filter_options(env=False))
@click.option(
    "--continuation",
    help="Resume from a token, or @FILE holding one: a cfp token or an official SDK's "
    "(CursorVersion 1; its EndTime applies unless --end-time is given).",
)
@click.option(
    "--save-continuation",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the position after the last printed event to FILE.",
)
@click.option(
    "--token-format",
    type=click.Choice(["cfp", "sdk"]),  # read_job.TokenFormat, which read_job.py owns
    default="cfp",
    show_default=True,
    help="What --save-continuation writes: a cfp token, or an official SDK's (CursorVersion 1).",
)
@click.option("--max-events", type=click.IntRange(min=1), help="Stop after N events.")
@click.option("--follow", is_flag=True, help="Keep polling for new events until interrupted.")
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
@click.option("--include-control", is_flag=True, help="Also print internal Control records.")
@format_option(
    None,
    "Print each event as the record read (native), the normalised envelope, a Debezium change "
    "event or a YDB changefeed record.",
)
@click.option(
    "--read-size",
    type=ByteSize(),
    default=f"{DEFAULT_READ_SIZE >> 20}MiB",
    show_default=True,
    help="Largest ranged GET per chunk read.",
)
@decode_deadline_option(None)
def read_command(**params: Any) -> None:
    """Print change feed events as JSON lines, in per-blob order.

    Exits 0 once everything consumable (up to lastConsumable) has been read, or keeps polling
    with --follow until SIGINT/SIGTERM. Errors go to stderr with a non-zero exit: 1 for bad
    data (the chunk and byte offset named), 3 when the native decoder got stuck.
    """
    from processor.changefeed.decoding.columnar import NATIVE  # noqa: PLC0415 - when run
    from processor.cli.read.read_job import ReadOptions, read_job  # noqa: PLC0415

    o = ReadOptions(**params)
    tune_gc()
    tune_memory()
    keep_pandas_out()
    NATIVE.deadline_s = o.decode_deadline
    raise SystemExit(run_async(read_job(o).run))
