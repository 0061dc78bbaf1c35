"""Offsets as Spark stores and compares them: JSON text that is the same for the same position,
whatever order the shards were met in."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.streaming.offsets import StreamOffset

shard_positions = st.builds(
    ShardPosition,
    st.sampled_from(
        [None, "log/00/2026/01/01/0000/00000.avro", "log/01/2026/01/01/0000/00003.avro"]
    ),
    st.integers(0, 1 << 40),
    st.integers(0, 10_000),
)
positions = st.builds(
    FeedPosition,
    st.sampled_from([None, "idx/segments/2026/01/01/0000/meta.json"]),
    st.booleans(),
    st.dictionaries(
        st.sampled_from([f"log/{i:02d}/2026/01/01/0000/" for i in range(6)]), shard_positions
    ),
)
times = st.none() | st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))


@given(positions, st.integers(0, 100), times)
def test_an_offset_survives_spark_json_and_reads_back_equal(
    position: FeedPosition, skipped: int, read_at: datetime | None
) -> None:
    offset = StreamOffset("acct", position, skipped, read_at)
    text = json.dumps(offset.to_dict())  # as Spark writes it: no sort_keys
    back = StreamOffset.from_dict(json.loads(text), account="acct")
    assert back == offset
    assert json.dumps(back.to_dict()) == text  # compared as text by Spark


@given(positions)
def test_the_text_does_not_depend_on_the_order_shards_were_met_in(position: FeedPosition) -> None:
    reordered = FeedPosition(
        position.segment,
        position.is_segment_done,
        dict(reversed(list(position.shards.items()))),
    )
    a = json.dumps(StreamOffset("acct", position).to_dict())
    b = json.dumps(StreamOffset("acct", reordered).to_dict())
    assert a == b


def test_an_offset_of_another_account_is_refused_by_name() -> None:
    doc = StreamOffset("other").to_dict()
    with pytest.raises(InvalidContinuation, match="'other', not 'acct'"):
        StreamOffset.from_dict(doc, account="acct")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": 2}, "version 1"),
        ({"shards": []}, "shards"),
        ({"skipped": -1}, "skipped"),
        ({"segment": 3}, "segment"),
        ({"shards": {"log/00/": {"chunk": "c", "offset": -1, "index": 0}}}, "offset/index"),
    ],
)
def test_a_damaged_offset_names_what_is_wrong(change: dict[str, object], named: str) -> None:
    doc = {**StreamOffset("acct").to_dict(), **change}
    with pytest.raises(InvalidContinuation, match=named):
        StreamOffset.from_dict(doc, account="acct")
