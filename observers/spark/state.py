"""The current-state table's rows, and how change events fold into them (pure, no I/O).

One row per blob ever seen: its properties after the newest event that touched it, or a
tombstone (`deleted`) after a delete. The fold is a last-writer-wins register per blob ordered
by the event's `sequencer`, so the result depends only on the *set* of events applied: any
order, any replays, any late event give the same rows (hypothesis-tested). A delete is kept as a
tombstone with its sequencer, so an older event that arrives late cannot bring the blob back.

Two properties are not carried by every event, so each has a register of its own: `tier`
(set by tier changes; a create or delete resets it) and `tags` (set by tag changes, schema v5+;
a create or delete resets them). Each keeps the sequencer of the event that last set it.

Events about snapshots (`snapshot` set, including `BlobSnapshotCreated`) leave the base blob as
it is, and records without a blob (Control, restore point markers) are not rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from observers.spark.schema import TAGS, TIMESTAMP

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

RESETS = pa.array(["BlobCreated", "BlobDeleted"])
"""Event types after which a blob has its default tier and no tags until told otherwise."""

_REGISTERS = (("tier", "tier_sequencer"), ("tags", "tags_sequencer"))
_SEPARATOR = "/"  # container names have no "/": "container/blob" is a unique key


def state_rows(changes: pa.Table) -> pa.Table:
    """The change log rows (`CHANGES_SCHEMA`) that concern a base blob, as `STATE_SCHEMA` rows:
    each is the state its event alone would leave."""
    about_blob = pc.and_(
        pc.and_(pc.not_equal(changes["container"], ""), pc.not_equal(changes["blob"], "")),
        pc.and_(pc.is_null(changes["snapshot"]), pc.not_equal(changes["event_type"], "Control")),
    )
    needed = [n for n in STATE_SCHEMA.names if n in changes.schema.names]
    rows = changes.select([*needed, "id"]).filter(about_blob)  # not the wide `raw` column
    event_type, sequencer = rows["event_type"], rows["sequencer"]
    resets = pc.is_in(event_type, value_set=RESETS)
    columns = {
        "container": rows["container"],
        "blob": rows["blob"],
        "deleted": pc.equal(event_type, "BlobDeleted"),
        "event_id": rows["id"],
    }
    for value, order in _REGISTERS:  # a register is set by a reset or by a value
        sets = pc.or_(resets, pc.is_valid(rows[value]))
        columns[order] = pc.if_else(sets, sequencer, pa.scalar(None, pa.string()))
    return pa.Table.from_arrays(
        [columns[name] if name in columns else rows[name] for name in STATE_SCHEMA.names],
        schema=STATE_SCHEMA,
    )


def merge_state(tables: Sequence[pa.Table]) -> pa.Table:
    """Fold `STATE_SCHEMA` tables (current rows and new ones, in any order) into one row per
    blob, sorted by container and blob.

    Per blob: the row with the highest `sequencer` (ties, which only a replay of the same
    event makes, go to the higher `event_id`), with `tier` and `tags` taken from the rows with
    the highest `tier_sequencer` and `tags_sequencer`.
    """
    table = pa.concat_tables(tables).combine_chunks()
    if table.num_rows == 0:
        return table
    keys = pc.binary_join_element_wise(table["container"], table["blob"], _SEPARATOR)
    table = table.append_column("_key", keys)
    rows = _newest_per_key(table, "sequencer")
    for value, order in _REGISTERS:
        setters = _newest_per_key(table.filter(pc.is_valid(table[order])), order)
        where = pc.index_in(rows["_key"], value_set=setters["_key"])
        rows = rows.set_column(
            rows.schema.get_field_index(value), value, setters[value].take(where)
        ).set_column(rows.schema.get_field_index(order), order, setters[order].take(where))
    return rows.drop_columns(["_key"]).cast(STATE_SCHEMA)


def _newest_per_key(table: pa.Table, order: str) -> pa.Table:
    """For each `_key`, the row that sorts last by (`order`, `event_id`); sorted by `_key`.
    Only the three columns are sorted; the other columns are taken for the winners alone."""
    n = table.num_rows
    if n == 0:
        return table
    by = table.select(["_key", order, "event_id"])
    ranked = pc.sort_indices(
        by, [("_key", "ascending"), (order, "ascending"), ("event_id", "ascending")]
    )
    keys = by["_key"].take(ranked)
    last_of_run = pc.not_equal(keys.slice(0, n - 1), keys.slice(1))  # the next row is another key
    keep = pa.chunked_array([*last_of_run.chunks, pa.array([True])])
    return table.take(ranked.filter(keep))
