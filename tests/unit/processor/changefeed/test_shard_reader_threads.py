"""The shard reader decodes off the event loop, and a read cancelled mid-decode loses nothing.

Decoding is the reader's CPU work; on the loop it held back a busy host's lease renewals until
its leases expired under it (bench/spark_ingest.py lost and replayed a quarter of its rows). A
window is decoded in one call, in a thread, while the loop goes on (`cfp read`'s other shards
download meanwhile).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from processor.changefeed import shard_reader
from processor.changefeed.shard_reader import ShardReader, ShardReading
from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage
from processor.emulator.avro_encoding import RecordEncoder, encode_block, encode_header
from tests import patience

SYNC = b"\x02" * 16
SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
CHUNK = "log/00/2026/01/01/0000/00000.avro"
PREFIX = "log/00/2026/01/01/0000/"


def chunk_bytes(blocks: int, per_block: int) -> bytes:
    enc = RecordEncoder(SCHEMA)
    data = encode_header(SCHEMA, SYNC)
    for b in range(blocks):
        data += encode_block([enc.encode({"n": b * per_block + i}) for i in range(per_block)], SYNC)
    return data


class BytesStorage(FeedStorage):
    """One chunk held in memory (the reader asks for listings and byte ranges only)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def list_blobs(self, prefix: str) -> list[BlobInfo]:
        return [BlobInfo(CHUNK, len(self.data))]

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]


async def read_all(reader: ShardReader) -> list[Any]:
    got: list[Any] = []
    while (read := await reader.read(is_finalized=True)).batch is not None:
        got += read.batch.records
    return got


async def test_records_are_decoded_in_a_thread_other_than_the_event_loops(
    monkeypatch: Any,
) -> None:
    threads: set[int] = set()
    decode = shard_reader.decode_window

    def spying(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return decode(*args, **kwargs)

    monkeypatch.setattr(shard_reader, "decode_window", spying)
    reader = ShardReader(BytesStorage(chunk_bytes(3, 10)), segment="s", prefix=PREFIX)
    records = await read_all(reader)
    assert [r["n"] for r in records] == list(range(30))
    assert threads and threading.get_ident() not in threads


async def test_a_read_cancelled_while_decoding_is_read_again_from_its_position(
    monkeypatch: Any,
) -> None:
    """The cancelled read's thread goes on moving through its window; the next read must not
    start where that thread stopped, but where the reader's position says."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    decode = shard_reader.decode_window
    calls = 0

    def slow_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls != 2:
            return decode(*args, **kwargs)
        started.set()  # the second window: the first one's batch was handed out already
        release.wait(patience.left_s())
        try:
            return decode(*args, **kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(shard_reader, "decode_window", slow_once)
    one_block = len(chunk_bytes(1, 5)) - len(encode_header(SCHEMA, SYNC))
    reader = ShardReader(
        BytesStorage(chunk_bytes(4, 5)),
        segment="s",
        prefix=PREFIX,
        how=ShardReading(batch_events=5, read_size=one_block),  # a window a block
    )
    first = await reader.read(is_finalized=True)
    assert first.batch is not None
    task = asyncio.create_task(reader.read(is_finalized=True))
    await asyncio.to_thread(started.wait, patience.left_s())
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    release.set()
    # the orphaned decode has ended
    assert await asyncio.to_thread(finished.wait, patience.left_s())
    rest = await read_all(reader)
    assert [r["n"] for r in first.batch.records + rest] == list(range(20))
