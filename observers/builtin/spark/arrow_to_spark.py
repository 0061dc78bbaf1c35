"""Sending an Arrow table to Spark in pieces a cluster can ship.

A table becomes a local relation: Spark keeps its rows in the driver and sends each partition
inside a task, and a leaf of local rows has at most `spark.sql.leafNodeDefaultParallelism`
partitions (by default the cluster's cores). On a cluster a task travels over RPC, which refuses
messages above `spark.rpc.message.maxSize` (128 MiB by default): measured on a standalone
cluster of two one-core workers, one append of 180,000 change log rows (290 MB of Arrow) failed
with a task of 162 MB. Tables above `PIECE_BYTES` are therefore sent as a union of
slices, one local relation each: one commit still, with tasks of at most about `PIECE_BYTES`.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

PIECE_BYTES = 32 << 20  # a quarter of Spark's RPC limit: room for the task's own encoding


def pieces(table: pa.Table, limit: int = PIECE_BYTES) -> list[pa.Table]:
    """`table` as consecutive slices of at most about `limit` bytes each (by the average row;
    at least one row a slice), in order; the table itself when it is small enough."""
    if table.num_rows == 0 or table.nbytes <= limit:
        return [table]
    per_row = max(1, table.nbytes // table.num_rows)
    rows = max(1, limit // per_row)
    return [table.slice(start, rows) for start in range(0, table.num_rows, rows)]


def to_frame(session: Any, table: pa.Table) -> Any:
    """One DataFrame of `table`'s rows, in pieces a cluster can ship (the module's docstring)."""
    frames = [session.createDataFrame(piece) for piece in pieces(table)]
    return functools.reduce(lambda a, b: a.unionByName(b), frames)
