"""Writes the `$blobchangefeed` layout into a real (emulated) storage account.

Driven by the emulator, one segment at a time: `begin_segment` publishes a `Publishing` manifest,
`add` queues records per shard and appends whole blocks as they fill, `flush` appends whatever is
queued, `finalize_segment` flushes, marks the manifest `Finalized` and moves `lastConsumable`.
Chunks are append blobs: the header is the first append, then one append per block; a chunk rolls
over to the next number once it passes `chunk_bytes`.
"""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import ContentSettings
from azure.storage.blob.aio import ContainerClient

from processor.changefeed.storage.layout import (
    CONTAINER,
    SEGMENTS_JSON,
    chunk_path,
    segment_path,
    shard_prefix,
)
from processor.emulator.avro_encoding import (
    RecordEncoder,
    encode_block,
    encode_header,
)
from processor.emulator.schemas import writer_schema

INIT_SEGMENT_BEGIN = datetime(1601, 1, 1, tzinfo=UTC)
AVRO_CONTENT = ContentSettings(content_type="avro/binary")
JSON_CONTENT = ContentSettings(content_type="application/json")


def iso_ms(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@dataclass(slots=True)
class _Shard:
    prefix: str
    chunk_number: int = -1
    chunk_size: int = 0
    pending: list[bytes] = field(default_factory=list)
    target: int = 1
    block_bytes: int = 0


@dataclass(slots=True)
class OpenSegment:
    begin: datetime
    shards: list[_Shard]
    schema_version: int


class FeedWriter:
    """Appends records to the feed's chunk files and keeps the manifests in step."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        rng: random.Random,
        block_events: tuple[int, int] = (1, 60),
        chunk_bytes: int = 4 << 20,
    ) -> None:
        self._container = container
        self._rng = rng
        self._block_events = block_events
        self._chunk_bytes = chunk_bytes
        self._sync = rng.randbytes(16)
        self.segment: OpenSegment | None = None
        self._encoders: dict[int, RecordEncoder] = {}
        self._headers: dict[int, bytes] = {}
        self.records_written = 0

    async def ensure_feed(self) -> None:
        """Create the container and the empty 1601 initialisation segment if missing."""
        with contextlib.suppress(ResourceExistsError):
            await self._container.create_container()
        init = segment_path(INIT_SEGMENT_BEGIN)
        if not await self._container.get_blob_client(init).exists():
            await self._put_json(init, self._manifest(INIT_SEGMENT_BEGIN, 1, "Finalized", 4))

    def _manifest(self, begin: datetime, shards: int, status: str, version: int) -> dict[str, Any]:
        return {
            "version": 0,
            "begin": iso_ms(begin),
            "intervalSecs": 3600,
            "status": status,
            "config": {
                "version": 1,
                "configVersionEtag": f"0x{self._rng.getrandbits(56):x}",
                "numShards": shards,
                "recordsFormat": "avro",
                "formatSchemaVersion": version,
                "shardDistFnVersion": 1,
                "streamAppendType": 3,
            },
            "chunkFilePaths": [f"{CONTAINER}/{shard_prefix(begin, i)}" for i in range(shards)],
            "storageDiagnostics": {"version": 0, "lastModifiedTime": iso_ms(datetime.now(UTC))},
        }

    async def _put_json(self, path: str, doc: dict[str, Any]) -> None:
        body = json.dumps(doc, separators=(",", ":")).encode()
        await self._container.upload_blob(path, body, overwrite=True, content_settings=JSON_CONTENT)

    def encoder(self, version: int) -> RecordEncoder:
        if version not in self._encoders:
            schema = writer_schema(version)
            self._encoders[version] = RecordEncoder(schema)
            self._headers[version] = encode_header(schema, self._sync)
        return self._encoders[version]

    async def begin_segment(self, begin: datetime, *, shards: int, schema_version: int) -> None:
        if self.segment is not None:
            raise RuntimeError("a segment is already open")
        self.encoder(schema_version)
        self.segment = OpenSegment(
            begin, [_Shard(shard_prefix(begin, i)) for i in range(shards)], schema_version
        )
        for s in self.segment.shards:
            s.target = self._rng.randint(*self._block_events)
        await self._put_json(
            segment_path(begin), self._manifest(begin, shards, "Publishing", schema_version)
        )

    async def add(self, shard: int, record: dict[str, Any]) -> None:
        """Queue one record for `shard`; appends a block once the shard's block is full."""
        seg = self._open()
        s = seg.shards[shard]
        s.pending.append(self._encoders[seg.schema_version].encode(record))
        if len(s.pending) >= s.target:
            await self._append_block(s)

    async def flush(self) -> None:
        """Append every queued record as a block (one per shard)."""
        seg = self._open()
        for s in seg.shards:
            if s.pending:
                await self._append_block(s)

    async def _append_block(self, s: _Shard) -> None:
        seg = self._open()
        block = encode_block(s.pending, self._sync)
        if s.chunk_number < 0 or (s.chunk_size + len(block) > self._chunk_bytes and s.block_bytes):
            s.chunk_number += 1
            header = self._headers[seg.schema_version]
            blob = self._container.get_blob_client(chunk_path(s.prefix, s.chunk_number))
            await blob.create_append_blob(content_settings=AVRO_CONTENT)
            await blob.append_block(header)
            s.chunk_size, s.block_bytes = len(header), 0
        blob = self._container.get_blob_client(chunk_path(s.prefix, s.chunk_number))
        await blob.append_block(block)
        s.chunk_size += len(block)
        s.block_bytes += len(block)
        self.records_written += len(s.pending)
        s.pending = []
        s.target = self._rng.randint(*self._block_events)

    async def finalize_segment(self, *, move_last_consumable: bool = True) -> None:
        """Flush, mark the open segment `Finalized`, and move `lastConsumable` to it."""
        seg = self._open()
        await self.flush()
        await self._put_json(
            segment_path(seg.begin),
            self._manifest(seg.begin, len(seg.shards), "Finalized", seg.schema_version),
        )
        if move_last_consumable:
            await self.set_last_consumable(seg.begin)
        self.segment = None

    async def finalize_leftover(self, path: str, doc: bytes, begin: datetime) -> None:
        """Finalize a segment an interrupted live run left `Publishing`."""
        manifest = json.loads(doc)
        manifest["status"] = "Finalized"
        await self._put_json(path, manifest)
        await self.set_last_consumable(begin)

    async def set_last_consumable(self, at: datetime) -> None:
        doc = {
            "version": 0,
            "lastConsumable": iso_ms(at),
            "storageDiagnostics": {"version": 0, "lastModifiedTime": iso_ms(datetime.now(UTC))},
        }
        await self._put_json(SEGMENTS_JSON, doc)

    def _open(self) -> OpenSegment:
        if self.segment is None:
            raise RuntimeError("no segment is open")
        return self.segment
