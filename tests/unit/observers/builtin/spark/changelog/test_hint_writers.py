"""Which writer commits a host's hints, and the delta-rs one against a real Delta table on a
local disk: appends from several hosts at once all land, each one commit, none lost (the
object store's case is tests/integration/test_spark.py's, through Azurite)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from observers.builtin.spark.changelog.hint_writers import HintWriter, delta_rs_commit, hint_writer
from observers.builtin.spark.tables import HINTS_PROPERTIES
from observers.changes import CHANGES_SCHEMA
from tests.state_model import Event, changes


@pytest.mark.parametrize(
    ("on_object_store", "embedded", "same_table"),
    list(itertools.product([False, True], repeat=3)),
)
def test_spark_writes_hints_only_into_a_folder_the_host_does_not_share(
    on_object_store: bool, embedded: bool, same_table: bool
) -> None:
    chosen = hint_writer(on_object_store=on_object_store, embedded=embedded, same_table=same_table)
    only_the_servers = not (on_object_store or embedded or same_table)
    assert chosen is (HintWriter.SPARK if only_the_servers else HintWriter.DELTA_RS)


async def test_appends_of_several_hosts_at_once_each_land_in_one_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "hints")
    write_deltalake(uri, CHANGES_SCHEMA.empty_table(), configuration=HINTS_PROPERTIES)
    hosts = [delta_rs_commit(uri, {}) for _ in range(3)]
    batches = [
        changes([Event(0, 10 * host + n, "created", 1) for n in range(5)], shard=f"{host:02d}")
        for host in range(3)
        for _ in range(4)
    ]
    await asyncio.gather(*(hosts[i % 3](b) for i, b in enumerate(batches)))
    table = DeltaTable(uri)
    assert table.version() == len(batches)  # one commit each, after the creation's 0
    written = table.to_pyarrow_table()
    assert written.num_rows == sum(b.num_rows for b in batches)
    want = sorted(itertools.chain.from_iterable(b.column("id").to_pylist() for b in batches))
    assert sorted(written.column("id").to_pylist()) == want
    assert written.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
