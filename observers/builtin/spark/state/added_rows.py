"""What commits added to a Delta table: the rows the state job folds, of the change log and of
the hints."""

from __future__ import annotations

from typing import Any


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
