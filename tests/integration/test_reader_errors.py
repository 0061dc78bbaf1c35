"""Bad data: typed errors that name the spot, other shards still read, nothing skipped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from processor.changefeed.decoding.avro_chunk import (
    BlockSpan,
    ChunkHeader,
    parse_header,
    read_long,
    scan_blocks,
)
from processor.changefeed.decoding.decode import RawRecord, decode_blocks
from processor.changefeed.errors import (
    BadMagicError,
    BadSyncMarkerError,
    ChunkError,
    ManifestError,
    TruncatedBlockError,
    TruncatedHeaderError,
    UndecodableBlockError,
    UnsafePathError,
)
from processor.changefeed.feed_reader import IncompleteRead
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.layout import CONTAINER
from processor.emulator.avro_encoding import encode_long_padded
from processor.emulator.azurite import Azurite
from processor.emulator.service import reset_account
from tests.helpers import EMULATOR_CONTAINERS, emulate, json_lines, read_all, run_cfp

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"
# about 500 records in each chunk of the first segment: enough for a native decode of the window
# (smaller ones go to fastavro at once), so that its failures and the fallback are what is tested
BAD_SHARD_FEED = {
    "seed": 21,
    "segments": 2,
    "events_per_segment": 1500,
    "shards": (3, 1),
    "block_events": (4, 8),
}
BAD_SHARD = "log/01/2026/01/01/0000/"


# Each corruption gets the chunk and its first three block offsets; it returns the damaged bytes,
# the byte offset the error must name, and how many leading blocks are still delivered.
Corruption = Callable[[bytes, list[int]], tuple[bytes, int, int]]


def bad_magic(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    return b"XXXX" + data[4:], 0, 0


def truncated_header(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    return data[:100], 100, 0


def bad_sync(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    at = blocks[2] - 16  # the sync marker that closes the second block
    return data[:at] + bytes(16) + data[at + 16 :], at, 1


def undecodable(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    start, end = blocks[1] + 20, blocks[2] - 16  # records of the second block, framing kept
    return data[:start] + b"\xff" * (end - start) + data[end:], blocks[1], 1


def _recount(data: bytes, at: int, change: int) -> bytes:
    """The chunk with the padded count varint of the block at `at` moved by `change` (its size
    and bytes left as they are: the framing still holds)."""
    count, _ = read_long(data, at)
    return data[:at] + encode_long_padded(count + change) + data[at + 10 :]


def count_too_high(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    return _recount(data, blocks[1], +1), blocks[1], 1


def _first_fields(data: bytes, block: int) -> list[int]:
    """Where the first record of the block at `block` starts, and each of its first four
    fields after it (schemaVersion, topic, subject, eventType)."""
    _, at = read_long(data, block)  # count
    _, at = read_long(data, at)  # size
    starts = [at]
    _, at = read_long(data, at)  # schemaVersion
    for _ in range(2):  # topic, subject: a length, then the bytes
        starts.append(at)
        length, at = read_long(data, at)
        at += length
    starts.append(at)
    return starts


def _long_in(n: int, width: int) -> bytes:
    """The zigzag varint of `n >= 0` padded to exactly `width` bytes."""
    z = n << 1
    assert z < 1 << (7 * width)
    return bytes(((z >> (7 * i)) & 0x7F) | (0x80 if i < width - 1 else 0) for i in range(width))


def string_too_long(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    at = _first_fields(data, blocks[1])[2]  # the subject's length, made 3 longer
    length, after = read_long(data, at)
    return data[:at] + _long_in(length + 3, after - at) + data[after:], blocks[1], 1


def bad_enum(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    at = _first_fields(data, blocks[1])[3]  # the eventType's symbol index: one no schema has
    return data[:at] + bytes([60 << 1]) + data[at + 1 :], blocks[1], 1


def torn_finalized(data: bytes, blocks: list[int]) -> tuple[bytes, int, int]:
    return data[: blocks[2] - 5], blocks[1], 1


CORRUPTIONS: dict[str, tuple[Corruption, type[ChunkError]]] = {
    "bad-magic": (bad_magic, BadMagicError),
    "truncated-header": (truncated_header, TruncatedHeaderError),
    "bad-sync": (bad_sync, BadSyncMarkerError),
    "undecodable-block": (undecodable, UndecodableBlockError),
    "block-count-one-too-high": (count_too_high, UndecodableBlockError),
    "string-length-too-long": (string_too_long, UndecodableBlockError),
    "enum-index-out-of-range": (bad_enum, UndecodableBlockError),
    "torn-block-in-finalized-segment": (torn_finalized, TruncatedBlockError),
}


async def _damage(
    account: str, chunk: str, corrupt: Callable[[bytes, list[BlockSpan]], bytes]
) -> tuple[bytes, ChunkHeader, list[BlockSpan]]:
    """Replace `chunk` by `corrupt(its bytes, its blocks)`; its bytes, header and blocks before."""
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        data = await (await c.download_blob(chunk)).readall()
        header = parse_header(data, chunk=chunk)
        scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=chunk)
        blocks = list(scan.blocks)
        await c.delete_blob(chunk)
        await c.upload_blob(chunk, corrupt(data, blocks))
    return data, header, blocks


@dataclass
class Pristine:
    """The bad-shard feed as emulated, kept to be put back after a test damaged it."""

    chunk: bytes = b""  # the chunk the tests damage
    manifest: bytes = b""
    good: list[RawRecord] = field(default_factory=list)  # every record, as read intact


PRISTINE = Pristine()
CHUNK = f"{BAD_SHARD}00000.avro"


async def _stored(account: str, name: str) -> bytes | None:
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        blob = c.get_blob_client(name)
        return await (await blob.download_blob()).readall() if await blob.exists() else None


@pytest.fixture
async def bad_shard_feed(azurite: Azurite) -> AsyncIterator[str]:
    """The account with the bad-shard feed intact: emulated once for the corruptions (each costs
    seconds), checked and put back after each (another test may have reset the account)."""
    conn = azurite.connection_string
    chunk, manifest = await _stored(conn, CHUNK), await _stored(conn, SEGMENT)
    if not PRISTINE.chunk or (chunk, manifest) != (PRISTINE.chunk, PRISTINE.manifest):
        async with BlobServiceClient.from_connection_string(conn) as service:
            await reset_account(service, EMULATOR_CONTAINERS)
        await emulate(conn, **BAD_SHARD_FEED)
        PRISTINE.chunk = await _stored(conn, CHUNK) or b""
        PRISTINE.manifest = await _stored(conn, SEGMENT) or b""
        PRISTINE.good, _ = await read_all(conn, event_filter=EventFilter(include_control=True))
    try:
        yield conn
    finally:
        async with ContainerClient.from_connection_string(conn, CONTAINER) as c:
            await c.upload_blob(CHUNK, PRISTINE.chunk, overwrite=True)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
async def test_corrupt_chunk_stops_only_its_shard(bad_shard_feed: str, kind: str) -> None:
    account, good = bad_shard_feed, PRISTINE.good
    everything = EventFilter(include_control=True)
    corrupt, error_type = CORRUPTIONS[kind]
    chunk = CHUNK
    spot: list[tuple[int, int]] = []

    def damaged(data: bytes, blocks: list[BlockSpan]) -> bytes:
        bad, offset, kept_blocks = corrupt(data, [b.offset for b in blocks[:3]])
        spot.append((offset, kept_blocks))
        return bad

    data, header, blocks = await _damage(account, chunk, damaged)
    ((offset, kept_blocks),) = spot
    # what must still arrive: all of shards 00 and 02, and shard 01 up to the bad block
    decoded = decode_blocks(
        data, base=0, blocks=blocks[:kept_blocks], skip=0, header=header, chunk=chunk
    ).records
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        assert [b.name async for b in c.list_blobs(name_starts_with=BAD_SHARD)] == [chunk]
    all_bad = {
        str(r["id"])
        for r in decode_blocks(
            data, base=0, blocks=blocks, skip=0, header=header, chunk=chunk
        ).records
    }
    bad_shard_ids = all_bad - {str(r["id"]) for r in decoded}
    first_segment = [r for r in good if r["eventTime"] < "2026-01-01T01"]
    expected = [str(r["id"]) for r in first_segment if str(r["id"]) not in bad_shard_ids]

    with pytest.raises(IncompleteRead) as e:
        await read_all(account, event_filter=everything)
    (failure,) = e.value.failures
    assert isinstance(failure.error, error_type)
    assert failure.error.chunk == chunk and failure.error.offset == offset
    assert failure.shard == BAD_SHARD

    result = await asyncio.to_thread(run_cfp, account, "read", "--include-control")
    assert result.returncode == 1
    assert chunk in result.stderr and f"at byte {offset}" in result.stderr
    read = [str(r["id"]) for r in json_lines(result.stdout)]
    # nothing of the second segment (the barrier holds), nothing after the bad spot
    assert sorted(read) == sorted(expected)


async def test_a_block_that_spins_the_native_decoder_stops_cfp_read_with_its_chunk(
    bad_shard_feed: str,
) -> None:
    """A block whose count is one short of its records makes arrow-avro spin for ever: the call
    is abandoned at its deadline, `cfp read` names the chunk, exits 3 and does not hang; what it
    printed is all good data from before the bad block."""
    account, good = bad_shard_feed, PRISTINE.good
    chunk = CHUNK
    data, header, blocks = await _damage(
        account, chunk, lambda data, blocks: _recount(data, blocks[1].offset, -1)
    )
    bad = {
        str(r["id"])
        for r in decode_blocks(
            data, base=0, blocks=blocks[1:], skip=0, header=header, chunk=chunk
        ).records
    }
    result = await asyncio.to_thread(
        run_cfp, account, "read", "--include-control", "--decode-deadline", "2"
    )
    assert result.returncode == 3, result.stderr
    assert f"{chunk} at byte {blocks[0].offset}" in result.stderr  # the window it was given
    assert "did not return within 2 s" in result.stderr
    printed = {str(r["id"]) for r in json_lines(result.stdout)}
    assert printed <= {str(r["id"]) for r in good} and not printed & bad


async def _rewrite_manifest(account: str, change: Callable[[dict[str, object]], object]) -> None:
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        doc = json.loads(await (await c.download_blob(SEGMENT)).readall())
        body = change(doc)
        await c.upload_blob(
            SEGMENT, body if isinstance(body, bytes) else json.dumps(doc), overwrite=True
        )


@pytest.mark.parametrize(
    ("change", "error_type", "text"),
    [
        (lambda d: b"{oops", ManifestError, "invalid JSON"),
        (lambda d: d.pop("chunkFilePaths"), ManifestError, "missing field 'chunkFilePaths'"),
        (
            lambda d: d.update(chunkFilePaths=["$blobchangefeed/log/../meta/"]),
            UnsafePathError,
            "outside",
        ),
        (lambda d: d.update(chunkFilePaths=["other/log/00/"]), UnsafePathError, "outside"),
    ],
    ids=["invalid-json", "missing-field", "dot-dot", "other-container"],
)
async def test_bad_manifest_is_refused_with_its_path(
    account: str,
    change: Callable[[dict[str, object]], object],
    error_type: type[Exception],
    text: str,
) -> None:
    await emulate(account, seed=22, segments=1, events_per_segment=20)
    await _rewrite_manifest(account, change)
    with pytest.raises(error_type) as e:
        await read_all(account)
    assert SEGMENT in str(e.value)
    result = await asyncio.to_thread(run_cfp, account, "read")
    assert result.returncode == 1
    assert SEGMENT in result.stderr and text in result.stderr
    assert result.stdout == ""


async def test_missing_chunk_of_a_saved_position_is_an_error(account: str) -> None:
    await emulate(
        account, seed=23, segments=1, events_per_segment=40, shards=(1,), chunk_bytes=4096
    )
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        chunks = [b.name async for b in c.list_blobs(name_starts_with="log/")]
        assert len(chunks) >= 2
        token = json.dumps(
            {
                "version": 1,
                "account": "devstoreaccount1",
                "segment": SEGMENT,
                "segmentDone": False,
                "shards": {
                    "log/00/2026/01/01/0000/": {"chunk": chunks[0], "offset": 0, "index": 0}
                },
            }
        )
        await c.delete_blob(chunks[0])
    result = await asyncio.to_thread(run_cfp, account, "read", "--continuation", token)
    assert result.returncode == 1
    assert chunks[0] in result.stderr and "gone" in result.stderr


async def test_bad_continuation_is_a_usage_error(account: str) -> None:
    result = await asyncio.to_thread(run_cfp, account, "read", "--continuation", "{}")
    assert result.returncode == 2 and "continuation" in result.stderr
