"""What commits added to a Delta table (the rows the state job folds, of the change log and of
the hints), and what the state job's own commits recorded of themselves."""

from __future__ import annotations

import json
from typing import Any


def recorded_version(history: list[Any], key: str) -> int | None:
    """The version the newest commit in `history` (rows of DESCRIBE HISTORY, newest first)
    recorded under `key` of its `userMetadata`; None when none did."""
    for row in history:
        try:
            meta = json.loads(row["userMetadata"] or "")
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and isinstance(meta.get(key), int):
            return int(meta[key])
    return None


def added_rows(session: Any, uri: str, applied: int, end: int, *, whole: bool) -> Any:
    """The rows the commits (applied, end] added to the Delta table at `uri` (its change data
    feed), or, `whole`, every row of its version `end`."""
    reader = session.read.format("delta")
    if whole:
        return reader.option("versionAsOf", end).load(uri)
    return (
        reader.option("readChangeFeed", "true")
        .option("startingVersion", applied + 1)
        .option("endingVersion", end)
        .load(uri)
        .where("_change_type = 'insert'")
    )
