"""The current-state table: one row per blob ever seen, kept by a Spark MERGE of the change log.

A row is the blob's properties after the newest event that touched it, or a tombstone
(`deleted`) after a delete. Newest means the highest `sequencer` (ties, which only the same
event met twice makes, go to the higher event id), so the table depends only on the set of
events applied: any order, any replays, any late event give the same rows. A delete is kept as a
tombstone with its sequencer, so an older event that arrives late cannot bring the blob back.

Two properties are not carried by every event, so each has a register of its own with the
sequencer of the event that last set it: `tier` (set by tier changes and by events carrying a
tier; a create or delete resets it) and `tags` (set by tag changes, schema v5+; a create or
delete resets them). Events about snapshots (`snapshot` set) leave the base blob as it is, and
records without a blob (Control, restore point markers) are not rows.

`newest_per_blob` folds a set of change log rows into one candidate row per blob (Spark SQL, one
aggregation); `merge_statement` applies the candidates to the table, each column only where the
candidate is newer than what the row holds.
"""

from __future__ import annotations

import pyarrow as pa

from observers.builtin.spark.sql import sql_string, table_ref
from observers.changes import TAGS, TIMESTAMP
from observers.envelope import DELETE_EVENTS

STATE_SCHEMA = pa.schema(
    [
        pa.field("container", pa.string(), nullable=False),
        pa.field("blob", pa.string(), nullable=False),
        pa.field("deleted", pa.bool_(), nullable=False),
        pa.field("etag", pa.string()),
        pa.field("content_length", pa.int64()),
        pa.field("content_type", pa.string()),
        pa.field("blob_type", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("tags", TAGS),
        pa.field("version", pa.string()),
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("event_time", TIMESTAMP, nullable=False),
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("sequencer", pa.string(), nullable=False),
        pa.field("tier_sequencer", pa.string()),
        pa.field("tags_sequencer", pa.string()),
    ]
)
"""`event_*` and `sequencer` are those of the newest event applied; `deleted` marks a tombstone
(the other columns then hold the blob as it was deleted). `tier_sequencer` and
`tags_sequencer` are the sequencers of the events that set `tier` and `tags`."""

RESETS = ("BlobCreated", "BlobDeleted")
"""Event types after which a blob has its default tier and no tags until told otherwise."""

NEWEST = (
    *("deleted", "etag", "content_length", "content_type", "blob_type", "version"),
    *("event_type", "event_time", "event_id", "sequencer"),
)
"""The columns that come from the newest event."""
REGISTERS = (("tier", "tier_sequencer"), ("tags", "tags_sequencer"))


def _strings(values: tuple[str, ...] | frozenset[str]) -> str:
    return ", ".join(sql_string(v) for v in sorted(values))


def blob_events(source: str) -> str:
    """SQL: the change log rows of view `source` that are about a base blob (not a snapshot,
    not a Control record), with what the folds need: `deleted`, and `resets` (tier and tags
    back to their defaults)."""
    return f"""SELECT container, blob, event_type, event_time, id AS event_id, sequencer, etag,
    content_length, content_type, blob_type, version, tier, tags,
    event_type IN ({_strings(DELETE_EVENTS)}) AS deleted,
    event_type IN ({_strings(RESETS)}) AS resets
  FROM {source}
  WHERE container <> '' AND blob <> '' AND snapshot IS NULL AND event_type <> 'Control'"""


def newest_per_blob(source: str) -> str:
    """SQL: the change log rows of view `source` as one `STATE_SCHEMA` row per blob."""
    order = "struct(sequencer, event_id)"
    registers = ",\n    ".join(
        f"max_by(struct({value}, sequencer AS {seq}), "
        f"CASE WHEN resets OR {value} IS NOT NULL THEN {order} END) AS {value}_set"
        for value, seq in REGISTERS
    )
    columns = ",\n  ".join(_folded_column(name) for name in STATE_SCHEMA.names)
    return f"""WITH events AS (
  {blob_events(source)}
), folded AS (
  SELECT container, blob,
    max_by(struct({", ".join(NEWEST)}), {order}) AS b,
    {registers}
  FROM events GROUP BY container, blob
)
SELECT
  {columns}
FROM folded"""


def _folded_column(name: str) -> str:
    """Where column `name` of a state row is in the `folded` rows of `newest_per_blob`."""
    if name in NEWEST:
        return f"b.{name}"
    for value, seq in REGISTERS:
        if name in (value, seq):
            return f"{value}_set.{name}"
    return name  # the key: container, blob


def merge_statement(table_uri: str, source: str) -> str:
    """SQL: apply the rows of view `source` (one per blob) to the state table: a new blob is
    inserted; a known blob's columns change only where the source is newer."""
    newer = "(s.sequencer > t.sequencer OR (s.sequencer = t.sequencer AND s.event_id > t.event_id))"
    newer_register = {
        seq: f"(s.{seq} IS NOT NULL AND (t.{seq} IS NULL OR s.{seq} > t.{seq}))"
        for _, seq in REGISTERS
    }
    sets = [f"{name} = CASE WHEN {newer} THEN s.{name} ELSE t.{name} END" for name in NEWEST]
    for value, seq in REGISTERS:
        sets += [
            f"{name} = CASE WHEN {newer_register[seq]} THEN s.{name} ELSE t.{name} END"
            for name in (value, seq)
        ]
    any_newer = " OR ".join([newer, *newer_register.values()])
    assignments = ",\n    ".join(sets)
    return (
        f"MERGE INTO {table_ref(table_uri)} AS t\nUSING {source} AS s\n"
        "ON t.container = s.container AND t.blob = s.blob\n"
        f"WHEN MATCHED AND ({any_newer}) THEN UPDATE SET\n    {assignments}\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )
