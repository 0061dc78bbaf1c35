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

With hints (`cfp run --hints-queue`) the table has two more columns (`HINT_COLUMNS`): a row whose
newest change came from a hint is `provisional` until the feed confirms it. The feed's rows
always win over a provisional one unless the hint is newer (same sequencer length, higher
sequencer); a hint applies only over a row it is newer than, by a sequencer of the same length
(`hint_merge_statement`), so hints replayed, late or out of order change nothing, and a hint's
tombstone holds against older records. Only creates and deletes are taken from hints: they say
what a blob is; the feed brings the rest.
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

HINT_COLUMNS = pa.schema([pa.field("provisional", pa.bool_()), pa.field("hinted_at", TIMESTAMP)])
"""Of a state table kept with hints: whether the row's newest change is a hint the feed has not
confirmed (null: never, as in a table made before hints), and when the state job took it."""
HINTED_EVENTS = ("BlobCreated", "BlobDeleted")
"""The hints the state table takes."""

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


def newest_per_blob(source: str, *, extra: str = "") -> str:
    """SQL: the change log rows of view `source` as one `STATE_SCHEMA` row per blob (with the
    `extra` columns, SQL, after them)."""
    order = "struct(sequencer, event_id)"
    registers = ",\n    ".join(
        f"max_by(struct({value}, sequencer AS {seq}), "
        f"CASE WHEN resets OR {value} IS NOT NULL THEN {order} END) AS {value}_set"
        for value, seq in REGISTERS
    )
    columns = ",\n  ".join(
        [*(_folded_column(name) for name in STATE_SCHEMA.names), *([extra] if extra else [])]
    )
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


FEED_CANDIDATE_EXTRA = "CAST(false AS BOOLEAN) AS provisional, CAST(NULL AS TIMESTAMP) AS hinted_at"
"""`newest_per_blob`'s `extra` for the feed's rows of a table kept with hints: confirmed."""
HINT_CANDIDATE_EXTRA = "CAST(true AS BOOLEAN) AS provisional, current_timestamp() AS hinted_at"


def merge_statement(table_uri: str, source: str, *, hints: bool = False) -> str:
    """SQL: apply the rows of view `source` (one per blob, from the feed) to the state table: a
    new blob is inserted; a known blob's columns change only where the source is newer. With
    `hints`, over a provisional row the feed wins unless the row's hint is newer than it by a
    sequencer of the same length (an equal one confirms the hint)."""
    newer = "(s.sequencer > t.sequencer OR (s.sequencer = t.sequencer AND s.event_id > t.event_id))"
    provisional = "coalesce(t.provisional, false)"
    if hints:
        newer = (
            f"(CASE WHEN {provisional} THEN (length(s.sequencer) <> length(t.sequencer) "
            f"OR s.sequencer >= t.sequencer) ELSE {newer} END)"
        )
    newer_register = {
        seq: f"(s.{seq} IS NOT NULL AND (t.{seq} IS NULL OR s.{seq} > t.{seq}"
        + (f" OR ({provisional} AND length(s.{seq}) <> length(t.{seq}))" if hints else "")
        + "))"
        for _, seq in REGISTERS
    }
    sets = [f"{name} = CASE WHEN {newer} THEN s.{name} ELSE t.{name} END" for name in NEWEST]
    if hints:
        sets += [
            f"{name} = CASE WHEN {newer} THEN s.{name} ELSE t.{name} END"
            for name in HINT_COLUMNS.names
        ]
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


def hint_merge_statement(table_uri: str, source: str) -> str:
    """SQL: apply the hints of view `source` (one candidate per blob, provisional) to the state
    table: a new blob is inserted; a known blob is replaced only by a hint newer than its row by
    a sequencer of the same length (sequencers of different lengths cannot be compared: the row,
    which the feed may have written, stays)."""
    newer = "length(s.sequencer) = length(t.sequencer) AND s.sequencer > t.sequencer"
    return (
        f"MERGE INTO {table_ref(table_uri)} AS t\nUSING {source} AS s\n"
        "ON t.container = s.container AND t.blob = s.blob\n"
        f"WHEN MATCHED AND {newer} THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )


def hinted_events(source: str) -> str:
    """SQL: the hint rows of view `source` the state table takes (`HINTED_EVENTS`)."""
    return f"SELECT * FROM {source} WHERE event_type IN ({_strings(frozenset(HINTED_EVENTS))})"
