"""What a shard read costs in requests: a chunk's header comes with its first window in one GET,
windows end where a GET of their own would have ended, and a finalized segment's shard is
listed once."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
from processor.changefeed.shard_reader import ShardReader, ShardReading
from processor.changefeed.storage.feed_storage import BlobInfo
from tests.unit.processor.changefeed.test_shard_reader_threads import (
    PREFIX,
    SYNC,
    BytesStorage,
    chunk_bytes,
)


class CountingStorage(BytesStorage):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.calls: Counter[str] = Counter()

    async def list_blobs(self, prefix: str) -> list[BlobInfo]:
        self.calls["list"] += 1
        return await super().list_blobs(prefix)

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        self.calls["get"] += 1
        return await super().read_range(path, offset, length)


async def windows_read(storage: BytesStorage, read_size: int, *, finalized: bool) -> list[int]:
    """The end offset of every batch, a batch a window (batches larger than any window)."""
    reading = ShardReading(read_size=read_size, batch_events=10_000)
    reader = ShardReader(storage, segment="s", prefix=PREFIX, how=reading)
    ends = []
    while (read := await reader.read(is_finalized=finalized)).batch is not None:
        ends.append(read.batch.end.block_offset)
    assert read.is_caught_up and read.is_complete == finalized
    return ends


@settings(max_examples=30, deadline=None)
@given(blocks=st.integers(1, 30), read_blocks=st.integers(1, 12), extra=st.integers(0, 40))
async def test_windows_end_where_a_get_of_read_size_from_their_first_block_ends(
    blocks: int, read_blocks: int, extra: int
) -> None:
    data = chunk_bytes(blocks, 5)
    header = parse_header(data, chunk="c")
    spans = scan_blocks(data[header.size :], base=header.size, sync=SYNC, chunk="c").blocks
    read_size = read_blocks * (spans[0].end - spans[0].offset) + extra
    want, gets, start = [], 0, header.size
    while start < len(data):  # each window: the whole blocks in read_size bytes from its start
        length = min(read_size, len(data) - start)
        gets += 1
        while not any(b.offset >= start and b.end <= start + length for b in spans):
            length, gets = min(2 * length, len(data) - start), gets + 1  # a block larger
        start = max(b.end for b in spans if b.offset >= start and b.end <= start + length)
        want.append(start)
    storage = CountingStorage(data)
    assert await windows_read(storage, read_size, finalized=True) == want
    # a GET a window (the first brings the header too, the others are read ahead) and one for
    # each time a window had to grow to hold a block; one listing
    assert storage.calls == Counter(get=gets, list=1)


async def test_a_shard_still_written_is_listed_again_and_its_new_blocks_found() -> None:
    storage = CountingStorage(chunk_bytes(3, 5))
    reader = ShardReader(storage, segment="s", prefix=PREFIX, how=ShardReading(batch_events=100))
    first = await reader.read(is_finalized=False)
    assert first.batch is not None and len(first.batch) == 15
    caught_up = await reader.read(is_finalized=False)
    assert caught_up.batch is None and not caught_up.is_complete
    assert storage.calls["list"] == 2  # the listing after the known bytes: nothing new yet
    storage.data = chunk_bytes(5, 5)  # two more blocks appended
    more = await reader.read(is_finalized=False)
    assert more.batch is not None and [r["n"] for r in more.batch.records] == list(range(15, 25))
