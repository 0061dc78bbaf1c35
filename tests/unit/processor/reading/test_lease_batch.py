import numpy as np
import pyarrow as pa

from observers import Origin
from processor.changefeed.decoding.avro_chunk import BlockSpan
from processor.changefeed.position import ShardPosition
from processor.changefeed.shard_batch import ShardBatch
from processor.reading.lease_batch import LeaseBatch

SEGMENT = "idx/segments/2026/01/01/0100/meta.json"
CHUNK = "log/00/2026/01/01/0100/00000.avro"


def shard_batch() -> ShardBatch:
    """Three records of one block of 100 bytes (data from 10 to 84, then the 16-byte sync)."""
    block = BlockSpan(offset=0, count=3, data_start=10, data_end=84)
    table = pa.table({"id": ["a", "b", "c"]})
    return ShardBatch(
        segment=SEGMENT,
        shard="log/00/",
        chunk=CHUNK,
        start=ShardPosition(CHUNK, 0, 0),
        end=ShardPosition(CHUNK, block.end, 0),
        blocks=(block,),
        table=table,
        offsets=np.zeros(3, np.int64),
        indexes=np.arange(3, dtype=np.int64),
        raw_count=3,
        json_of_rows=lambda: pa.array(['{"id":"a"}', '{"id":"b"}', '{"id":"c"}']),
    )


def test_a_shard_batch_hands_on_its_columns_and_its_bytes() -> None:
    read = shard_batch()
    batch = LeaseBatch.of_shard(read)
    assert (batch.segment, len(batch), batch.read_bytes) == (SEGMENT, 3, read.read_bytes)
    assert batch.read_share == read.read_share == 100
    origin = Origin("00", SEGMENT, "proc")
    arrow = batch.arrow(origin)
    assert arrow.records is read.table  # the decoded columns, never a copy
    assert arrow.origin is origin
    assert arrow.positions.to_pylist() == read.positions().to_pylist()
    assert arrow.json().to_pylist()[0] == '{"id":"a"}'


def test_records_of_the_scan_read_no_bytes_of_the_feed() -> None:
    records = [{"id": "x", "eventTime": "2026-01-01T00:00:00Z"}]
    batch = LeaseBatch.of_records("scan/2026-01-01T00:00:00+00:00", records, ["~c x"])
    assert (len(batch), batch.read_bytes, batch.read_share) == (1, 0, 0)
    arrow = batch.arrow(Origin("scan-00", batch.segment))
    assert arrow.dicts() == records and arrow.positions.to_pylist() == ["~c x"]
