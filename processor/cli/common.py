"""Pieces shared by the `cfp` commands: parameter types, the async runner, error exits."""

from __future__ import annotations

import asyncio
import functools
import re
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, NoReturn, TypeVar

import click

from leases.store.table_settings import DEFAULT_TABLE
from observers.builtin.spark.settings import DEFAULT_MASTER
from observers.formats import Format
from processor import connection
from processor.redact import redact
from processor.runtime import DECODER_STUCK_EXIT, DEFAULT_DECODE_DEADLINE_S

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_PROCESSOR = "default"


class IsoTime(click.ParamType[datetime]):
    name = "ISO-TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            t = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 time such as 2026-01-01T10:00:00Z", param, ctx)
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


class ByteSize(click.ParamType[int]):
    name = "BYTES"
    _units: ClassVar[dict[str, int]] = {
        "": 1,
        "k": 1 << 10,
        "kib": 1 << 10,
        "m": 1 << 20,
        "mib": 1 << 20,
        "g": 1 << 30,
        "gib": 1 << 30,
    }

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in self._units:
            self.fail(f"{value!r} is not a size such as 4MiB or 65536", param, ctx)
        return int(m.group(1)) * self._units[m.group(2).lower()]


def run_async(main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
    """Run `main(stop)`; SIGINT and SIGTERM set `stop` so that it can finish cleanly, and
    SIGUSR1 logs where every task waits."""

    from processor.stacks import log_stacks_on_signal  # noqa: PLC0415 - structlog: when run

    async def wrapper() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        log_stacks_on_signal(loop)
        try:
            return await main(stop)
        finally:
            await connection.close_credentials()

    return asyncio.run(wrapper())


def say_error(message: object) -> None:
    """One `cfp: error:` line on stderr, with secrets masked (SDK errors may quote URLs)."""
    click.echo(f"cfp: error: {redact(str(message))}", err=True)


async def unless_decoder_stuck(run: Awaitable[int], stop: Callable[[], None]) -> int:
    """`run`'s exit status; or, when a native decode got stuck meanwhile, `stop` called from
    the loop (at once), the stuck call named on stderr and `DECODER_STUCK_EXIT`: the call holds
    a core for as long as the process lives, so the process leaves to be restarted."""
    from processor.changefeed.decoding.columnar import NATIVE, StuckDecode  # noqa: PLC0415 - when run

    loop = asyncio.get_running_loop()
    stuck: list[StuckDecode] = []

    def on_stuck(call: StuckDecode) -> None:  # in the thread that waited for the call
        stuck.append(call)
        loop.call_soon_threadsafe(stop)

    forget = NATIVE.on_stuck(on_stuck)
    try:
        status = await run
    finally:
        forget()
    if stuck:
        say_error(stuck[0])
        return DECODER_STUCK_EXIT
    return status


def fail(message: str, code: int = 1) -> NoReturn:
    say_error(message)
    raise SystemExit(code)


connection_option = click.option(
    "--connection-string",
    "connection_string",
    envvar=connection.ENV_VAR,
    default=None,
    help=f"Storage connection string (default: ${connection.ENV_VAR}, else local Azurite).",
)


def format_option(envvar: str | None, help_text: str) -> Callable[[Any], Any]:
    """`--format native|envelope|debezium|ydb` (see `observers.formats`)."""
    return click.option(
        "--format",
        "output_format",
        envvar=envvar,
        type=click.Choice([f.value for f in Format]),
        default=Format.NATIVE.value,
        show_default=True,
        help=help_text,
    )


def decode_deadline_option(envvar: str | None) -> Callable[[Any], Any]:
    """`--decode-deadline SECONDS`: how long one native decode of a window may take."""
    return click.option(
        "--decode-deadline",
        envvar=envvar,
        type=click.FloatRange(min=0.1),
        default=DEFAULT_DECODE_DEADLINE_S,
        show_default=True,
        help="Seconds a native decode of one window may take. One that takes longer is stuck "
        "(it cannot be stopped): its window is decoded with fastavro instead, and the command "
        f"stops taking work and exits {DECODER_STUCK_EXIT}, to be restarted.",
    )


output_connection_option = click.option(
    "--output-connection-string",
    "output_connection_string",
    envvar="CFP_OUTPUT_CONNECTION_STRING",
    help="Connection string of the account an abfss:// --output is in (default: the feed's; "
    "without a key or SAS, and for any other account, Microsoft Entra ID).",
)
spark_master_option = click.option(
    "--spark-master",
    envvar="CFP_SPARK_MASTER",
    default=DEFAULT_MASTER,
    show_default=True,
    help="Master of the embedded Spark session.",
)
spark_remote_option = click.option(
    "--spark-remote",
    envvar="CFP_SPARK_REMOTE",
    help="sc://HOST:PORT of a Spark Connect server, instead of an embedded session; several, "
    "comma-separated, for a host to use the first that answers and move to the next when it "
    "is lost.",
)
spark_conf_option = click.option(
    "--spark-conf",
    "spark_conf_pairs",
    envvar="CFP_SPARK_CONF",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting (repeatable; the variable takes several, space-separated).",
)
lease_connection_option = click.option(
    "--lease-connection-string",
    envvar="CFP_LEASE_CONNECTION_STRING",
    help="Connection string of the account holding the lease table (default: the feed's).",
)
lease_table_option = click.option(
    "--lease-table",
    envvar="CFP_LEASE_TABLE",
    default=DEFAULT_TABLE,
    show_default=True,
    help="Azure Table holding the leases.",
)
processor_option = click.option(
    "--processor-name",
    envvar="CFP_PROCESSOR_NAME",
    default=DEFAULT_PROCESSOR,
    show_default=True,
    help="Durable identity of the processor; its hosts share its leases (the PartitionKey).",
)


Options = tuple[Callable[[Any], Any], ...]

# which processor, in which lease table (every command that works on a processor's leases)
PROCESSOR_OPTIONS: Options = (
    connection_option,
    lease_connection_option,
    lease_table_option,
    processor_option,
)


def option_names(group: Options) -> tuple[str, ...]:
    """The parameter names `group`'s options declare, in order (for `--help` sections)."""

    def command() -> None: ...

    for decorate in reversed(group):
        decorate(command)
    params: list[click.Parameter] = getattr(command, "__click_params__", [])
    return tuple(p.name for p in reversed(params) if p.name is not None)


def options(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """Several click options as one decorator, applied in the order they are listed (so that
    `--help` lists them in that order)."""

    def apply(command: F) -> F:
        for decorate in reversed(decorators):
            command = decorate(command)
        return command

    return apply


def bundled(name: str, make: Callable[..., Any], *group: Callable[[Any], Any]) -> Callable[[F], F]:
    """`group`'s options, given to the command as one value `name` made by `make` from them by
    their parameter names: a command that shares a group takes one parameter for it."""
    names = option_names(group)

    def apply(command: F) -> F:
        @functools.wraps(command)
        def with_bundle(*args: Any, **params: Any) -> Any:
            value = make(**{n: params.pop(n) for n in names})
            return command(*args, **{name: value}, **params)

        return options(*group)(with_bundle)  # type: ignore[return-value]

    return apply


@dataclass(frozen=True, slots=True)
class ProcessorAddress:
    """Which processor, in which lease table (`PROCESSOR_OPTIONS`)."""

    connection_string: str | None = field(repr=False)  # secrets: never in a repr
    lease_connection_string: str | None = field(repr=False)
    lease_table: str
    processor_name: str

    @property
    def conn(self) -> str:
        """The feed account's connection string: the flag's, else `CFP_CONNECTION_STRING`'s,
        else the local Azurite account's."""
        return connection.resolve(self.connection_string)


# `where: ProcessorAddress` of a command that works on a processor's leases
processor_address = bundled("where", ProcessorAddress, *PROCESSOR_OPTIONS)


BLOB_TYPES = ("BlockBlob", "AppendBlob", "PageBlob")
# The event types of the change feed's schemas up to version 6 (Azure's "Change feed support in
# Azure Blob Storage" page), and the initial scan's own. The service may add more: an unknown
# name is not refused, only warned about (a typo would deliver nothing and say nothing).
EVENT_TYPES = (
    "BlobCreated",
    "BlobDeleted",
    "BlobPropertiesUpdated",
    "BlobSnapshotCreated",
    "BlobTierChanged",
    "BlobAsyncOperationInitiated",
    "RestorePointMarkerCreated",
    "BlobBackfill",
)


def _warn_of_unknown_event_types(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    unknown = sorted(set(values) - set(EVENT_TYPES))
    if unknown:
        click.echo(
            f"cfp: warning: --event-type {', '.join(unknown)}: not an event type the change feed "
            f"documents ({', '.join(EVENT_TYPES)}); unless the service sends it, nothing matches",
            err=True,
        )
    return values


def filter_options(*, env: bool) -> tuple[Callable[[Any], Any], ...]:
    """`--container`, `--blob-prefix`, `--event-type`, `--blob-type` (with `CFP_*` variables
    when `env`; a variable takes several values space-separated). They make a `ChangeFilter`."""

    def var(name: str) -> str | None:
        return f"CFP_{name}" if env else None

    return (
        click.option(
            "--container",
            "containers",
            envvar=var("CONTAINER"),
            multiple=True,
            metavar="NAME",
            help="Only blobs of this container; a glob such as 'logs-*' allowed (repeatable).",
        ),
        click.option(
            "--blob-prefix",
            envvar=var("BLOB_PREFIX"),
            default="",
            metavar="PREFIX",
            help="Only blobs whose name (in their container) starts with PREFIX.",
        ),
        click.option(
            "--event-type",
            "event_types",
            envvar=var("EVENT_TYPE"),
            multiple=True,
            metavar="TYPE",
            callback=_warn_of_unknown_event_types,
            help="Only these event types, e.g. BlobCreated (repeatable).",
        ),
        click.option(
            "--blob-type",
            "blob_types",
            envvar=var("BLOB_TYPE"),
            multiple=True,
            type=click.Choice(BLOB_TYPES),
            help="Only blobs of this type (repeatable).",
        ),
    )


class SectionedCommand(click.Command):
    """A command whose `--help` lists its options in sections, by concern (`sections`: title ->
    parameter names, in order); `--help` itself last."""

    def __init__(self, *args: Any, sections: dict[str, tuple[str, ...]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_name = {p.name: p for p in self.get_params(ctx)}
        for title, names in self.sections.items():
            rows = [r for n in names if (r := by_name[n].get_help_record(ctx)) is not None]
            with formatter.section(title):
                formatter.write_dl(rows)
        listed = {n for names in self.sections.values() for n in names}
        rest = [r for n, p in by_name.items() if n not in listed and (r := p.get_help_record(ctx))]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
