"""The change log: each event exactly once for any Delta reader, whoever writes it and when.

An event's key is its lease (`shard`) and its `position` in the lease's feed (the same for every
reader, strictly increasing along a lease). A write is one Delta MERGE of the host's batches:

    MERGE INTO changes t USING batch s
    ON t.shard = s.shard AND t.position = s.position
       AND t.shard IN (<the write's leases>)
       AND ((t.shard = '<lease>' AND t.position BETWEEN '<first>' AND '<last>') OR ...)
    WHEN NOT MATCHED THEN INSERT *

so a write inserts only the events the table does not hold yet. The extra conditions only narrow
what the MERGE reads: the partitions of its own leases, and within them the files whose
`position` statistics overlap the write's range (none, for new events). Delta commits a MERGE
only if no commit since it read the table added files to the partitions it read; otherwise it
fails with a concurrent-modification error and is run again (`insert_unseen`), against the newer
table. Hence:

- a batch replayed after a crash (the lease's checkpoint lags the change log) inserts nothing
  that is there, however it is cut into writes;
- a paused host (a zombie) that wakes up and commits late inserts nothing: the lease's next
  owner wrote those events first, or it finds the zombie's rows and skips them;
- hosts writing different leases never fail each other (disjoint partitions), and two writers of
  one lease cannot both insert an event: one of the two commits is refused and redone.

The checkpoint of a batch moves only after the commit that holds it, so nothing is skipped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from observers.spark.sql import sql_string, table_ref

# a commit refused because another one changed what it read: run it again on the newer table
CONFLICT = re.compile(
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException|DELTA_CONCURRENT|DELTA_METADATA_CHANGED"
    r"|DELTA_PROTOCOL_CHANGED"
)
COMMIT_ATTEMPTS = 12


def is_conflict(error: BaseException) -> bool:
    """A Delta concurrent-modification error (in an embedded session or over Spark Connect)."""
    return bool(CONFLICT.search(f"{type(error).__name__}: {error}"))


def conflict_retrying(attempts: int = COMMIT_ATTEMPTS) -> Retrying:
    """Bounded, jittered retries of Delta commit conflicts; every other error propagates."""
    return Retrying(
        retry=retry_if_exception(is_conflict),
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.1, max=5.0),
        reraise=True,
    )


@dataclass(frozen=True, slots=True)
class Range:
    """The positions one write holds of one lease (all of them in between: a lease's batches
    reach the sink in order and a write takes them in order)."""

    lease: str
    first: str
    last: str


def lease_ranges(tables: Mapping[str, pa.Table]) -> list[Range]:
    """Each lease's range of positions in a write (leases without rows left out)."""
    out = []
    for lease, table in sorted(tables.items()):
        if table.num_rows:
            positions = table.column("position")
            out.append(Range(lease, pc.min(positions).as_py(), pc.max(positions).as_py()))
    return out


def merge_statement(table_uri: str, source: str, ranges: list[Range]) -> str:
    """The insert-if-absent MERGE of the rows of view `source` into the change log."""
    if not ranges:
        raise ValueError("a change log write needs rows")
    leases = ", ".join(sql_string(r.lease) for r in ranges)
    spans = "\n    OR ".join(
        f"(t.shard = {sql_string(r.lease)} AND t.position BETWEEN {sql_string(r.first)} "
        f"AND {sql_string(r.last)})"
        for r in ranges
    )
    return (
        f"MERGE INTO {table_ref(table_uri)} AS t\nUSING {source} AS s\n"
        f"ON t.shard = s.shard AND t.position = s.position\n"
        f"  AND t.shard IN ({leases})\n  AND ({spans})\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )


@dataclass(frozen=True, slots=True)
class Inserted:
    rows: int  # rows the write held
    inserted: int  # of them, new to the change log
    attempts: int  # commits tried (more than one: another writer committed first)

    @property
    def skipped(self) -> int:
        """Rows the change log held already (a replay, or a zombie's late write)."""
        return self.rows - self.inserted


class ChangeLog:
    """Writes of one host into `table_uri`, from one thread at a time (the sink's)."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri

    def insert_unseen(self, session: Any, tables: Mapping[str, pa.Table]) -> Inserted:
        """Insert each lease's rows that the change log lacks, in one commit (blocking).
        Errors: Spark's, after `COMMIT_ATTEMPTS` conflicts or at once for anything else."""
        ranges = lease_ranges(tables)
        rows = sum(t.num_rows for t in tables.values())
        frames = [session.createDataFrame(tables[r.lease]) for r in ranges]
        source = frames[0]
        for frame in frames[1:]:  # no task (and no file) mixes two leases
            source = source.union(frame)
        view = f"cfp_write_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        statement = merge_statement(self.table_uri, view, ranges)
        attempts = 0
        try:
            for attempt in conflict_retrying():
                with attempt:
                    attempts += 1
                    result = session.sql(statement).collect()
        finally:
            session.catalog.dropTempView(view)
        inserted = int(result[0]["num_inserted_rows"]) if result else 0
        return Inserted(rows, inserted, attempts)
