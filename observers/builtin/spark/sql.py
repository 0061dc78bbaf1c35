"""Spark SQL text: string literals and path-based Delta tables, quoted once, here."""

from __future__ import annotations


def sql_string(value: str) -> str:
    """`value` as a Spark SQL string literal (backslashes are escapes in Spark SQL)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_ref(uri: str) -> str:
    """A path-based Delta table in SQL: delta.`URI`."""
    return "delta.`" + uri.replace("`", "``") + "`"
