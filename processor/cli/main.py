"""The `cfp` command group; each command comes from its own module and loads what it needs
when it runs, so that `cfp --help` and `cfp CMD --help` answer at once."""

from __future__ import annotations

import functools
import sys
from typing import Any

import click

from processor.cli.emulate import emulate_command
from processor.cli.lease import lease_group
from processor.cli.pause import pause_command, resume_command
from processor.cli.processor_group import processor_group
from processor.cli.read import read_command
from processor.cli.run import run_command
from processor.cli.spark import (
    optimize_command,
    sql_command,
    verify_command,
)
from processor.cli.spark_connect import spark_connect_command
from processor.cli.status import status_command
from processor.logs import configure_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="changefeed-processor", prog_name="cfp")
@click.option("--log-level", default="INFO", envvar="CFP_LOG_LEVEL", show_default=True)
@click.option(
    "--log-json/--log-console",
    default=None,
    envvar="CFP_LOG_JSON",
    help="Log JSON lines or console lines on stderr (default: JSON unless stderr is a terminal).",
)
@click.pass_context
def main(ctx: click.Context, log_level: str, log_json: bool | None) -> None:
    """cfp: a lease-coordinated host for the Azure Blob Storage change feed."""
    ctx.meta[LOGGING] = {
        "level": log_level,
        "json_lines": not sys.stderr.isatty() if log_json is None else log_json,
    }


LOGGING = "cfp.logging"


def logs_first(command: click.Command) -> click.Command:
    """Configure logging when `command` (or, for a group, each of its commands) runs, after
    its options are parsed: `cfp CMD --help` then exits before structlog loads."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            logs_first(sub)
        return command
    callback = command.callback
    assert callback is not None

    @functools.wraps(callback)
    def configured(*args: Any, **kwargs: Any) -> Any:
        configure_logging(**click.get_current_context().meta[LOGGING])
        return callback(*args, **kwargs)

    command.callback = configured
    return command


main.add_command(logs_first(emulate_command))
main.add_command(logs_first(read_command))
main.add_command(logs_first(run_command))
main.add_command(logs_first(status_command))
main.add_command(logs_first(lease_group))
main.add_command(logs_first(pause_command))
main.add_command(logs_first(processor_group))
main.add_command(logs_first(resume_command))
main.add_command(logs_first(verify_command))
main.add_command(logs_first(sql_command))
main.add_command(logs_first(optimize_command))
main.add_command(logs_first(spark_connect_command))
