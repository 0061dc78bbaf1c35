"""The `cfp` command group; each command comes from its own module, imported when the command is
named, and loads what it needs when it runs: `cfp read` imports neither the host nor the
emulator, and `cfp --help` and `cfp CMD --help` answer at once."""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

import click

from processor.logs import configure_logging

COMMANDS = {
    "emulate": "processor.cli.emulate_command:emulate_command",
    "read": "processor.cli.read.read_command:read_command",
    "run": "processor.cli.run.run_command:run_command",
    "status": "processor.cli.admin.status_command:status_command",
    "lease": "processor.cli.admin.lease_commands:lease_group",
    "pause": "processor.cli.admin.pause_commands:pause_command",
    "resume": "processor.cli.admin.pause_commands:resume_command",
    "processor": "processor.cli.admin.processor_group:processor_group",
    "verify": "processor.cli.spark.table_commands:verify_command",
    "sql": "processor.cli.spark.table_commands:sql_command",
    "optimize": "processor.cli.spark.table_commands:optimize_command",
    "spark-connect": "processor.cli.spark.spark_connect_command:spark_connect_command",
}
"""Each command's module and name in it."""


class Commands(click.Group):
    """The commands of `COMMANDS`, each imported the first time it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is not None and cmd_name not in self.commands:
            module, attribute = where.split(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(logs_first(with_variables(command, cmd_name)), cmd_name)
        return self.commands.get(cmd_name)


@click.group(
    cls=Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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


def with_variables(command: click.Command, path: str) -> click.Command:
    """Give every option of `command` (each command of a group) that has no variable of its own
    `CFP_<COMMAND>_<OPTION>`, `cfp lease move --to` `CFP_LEASE_MOVE_TO` for example: the options
    of `cfp run` and those several commands share (`CFP_CONNECTION_STRING`, `CFP_PROCESSOR_NAME`,
    the Spark ones) name their own."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            with_variables(sub, f"{path} {name}")
        return command
    prefix = "CFP_" + "_".join(path.replace("-", "_").upper().split())
    for option in command.params:
        if isinstance(option, click.Option) and option.envvar is None:
            flag = option.opts[0].lstrip("-").replace("-", "_").upper()
            option.envvar = f"{prefix}_{flag}"
    return command


def command_named(name: str) -> click.Command:
    """The command `cfp NAME` runs (its module imported now)."""
    found = main.get_command(click.Context(main), name)
    if found is None:
        raise KeyError(f"cfp has no command {name!r}")
    return found
