"""Tables handed to Spark in pieces: every row once, in order, none above the limit but single
rows."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from observers.builtin.spark.arrow_to_spark import pieces


@given(
    rows=st.lists(st.text(max_size=300), max_size=200),
    limit=st.integers(min_value=1, max_value=20_000),
)
def test_pieces_keep_every_row_in_order_within_the_limit(rows: list[str], limit: int) -> None:
    table = pa.table({"raw": pa.array(rows, pa.string()), "n": pa.array(range(len(rows)))})
    found = pieces(table, limit)
    assert pa.concat_tables(found).equals(table)
    if table.nbytes <= limit:
        assert found == [table]
    else:
        per_row = table.nbytes // table.num_rows
        assert all(p.num_rows <= max(1, limit // max(1, per_row)) for p in found)


def test_a_big_table_becomes_slices_of_about_the_limit() -> None:
    table = pa.table({"raw": pa.array(["x" * 1000] * 10_000)})  # about 10 MB
    found = pieces(table, 1 << 20)
    assert len(found) >= 9 and all(p.nbytes <= (1 << 20) * 1.1 for p in found)
