"""Where a host commits its hints (`HintAppends`): with delta-rs straight into `OUTPUT/hints`
when the host reaches that table's storage itself, else through Spark.

delta-rs appends a few hundred rows in a fraction of a second and costs Spark nothing, where a
Spark commit costs the server a job per host per `--spark-max-wait` (seconds on a loaded
server, which is then the hints' age). The host reaches the table on the object store (with
the credentials it gives Spark), and in a local folder when Spark is embedded or when the
Spark Connect server's folder is the host's too (the table found there is the server's: the
same table id). Both writers append to one table side by side: a Delta commit is put only if
its version is absent, on the object store as on a local disk, and a loser retries on the next
version."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pyarrow as pa
import structlog

from observers.builtin.spark.arrow_to_spark import to_frame
from observers.builtin.spark.changelog.hint_appends import Commit
from observers.builtin.spark.commits import conflict_retrying
from observers.builtin.spark.session.link import Sessions, SparkLink, call_patiently
from observers.builtin.spark.session.output import delta_rs_options
from observers.builtin.spark.session.session import SparkOptions
from observers.builtin.spark.sql import table_ref

log = structlog.get_logger("cfp.spark")


class HintWriter(StrEnum):
    DELTA_RS = "delta-rs"
    SPARK = "spark"


def hint_writer(*, on_object_store: bool, embedded: bool, same_table: bool) -> HintWriter:
    """delta-rs wherever the host reaches the table itself; Spark for a local folder that is
    only the server's."""
    if on_object_store or embedded or same_table:
        return HintWriter.DELTA_RS
    return HintWriter.SPARK


async def hint_commit(link: SparkLink, options: SparkOptions) -> tuple[Commit, HintWriter]:
    """The commit of the host's hints, once the tables exist (`open_tables`)."""
    output = options.output
    local = output.local
    uri = str(local / "hints") if local is not None else output.hints
    same = False
    if local is not None and options.remotes:
        same = await _same_table(link, output.hints, uri)
    writer = hint_writer(
        on_object_store=local is None, embedded=not options.remotes, same_table=same
    )
    log.info("spark.hints_writer", writer=writer.value, table=output.describe())
    if writer is HintWriter.DELTA_RS:
        return delta_rs_commit(uri, delta_rs_options(output, options.access)), writer
    return spark_commit(link, output.hints), writer


def delta_rs_commit(uri: str, storage_options: Mapping[str, str]) -> Commit:
    """An append with delta-rs, in a thread (it releases the GIL while it writes)."""
    append = functools.partial(_delta_rs_append, uri, dict(storage_options) or None)

    async def commit(table: pa.Table) -> None:
        await asyncio.to_thread(append, table)

    return commit


def _delta_rs_append(uri: str, storage_options: dict[str, str] | None, table: pa.Table) -> None:
    from deltalake import write_deltalake  # noqa: PLC0415 - only hosts with hints load it

    write_deltalake(uri, table, mode="append", storage_options=storage_options)


def spark_commit(link: SparkLink, uri: str) -> Commit:
    """An append through the host's Spark session (retried on Delta's conflicts)."""

    def write(sessions: Sessions, table: pa.Table) -> None:
        writer = to_frame(sessions.writer, table).write.format("delta").mode("append")
        for attempt in conflict_retrying():
            with attempt:
                writer.save(uri)

    async def commit(table: pa.Table) -> None:
        await link.call(lambda s: write(s, table), what="a hints write")

    return commit


async def _same_table(link: SparkLink, spark_uri: str, local_path: str) -> bool:
    """Whether the local folder holds the very table the Spark Connect server made there."""
    from deltalake import DeltaTable  # noqa: PLC0415
    from deltalake.exceptions import DeltaError  # noqa: PLC0415

    def server_id(sessions: Sessions) -> Any:
        return sessions.writer.sql(f"DESCRIBE DETAIL {table_ref(spark_uri)}").collect()[0]["id"]

    try:
        mine = await asyncio.to_thread(lambda: DeltaTable(local_path).metadata().id)
    except (DeltaError, OSError):  # none there: the server's folder is not the host's
        return False
    return bool(mine == await call_patiently(link, server_id, what="the hints table's id"))
