"""Made-up change feed records, shaped like the service's and about as wide: for warming up a
fresh Spark session's writer, and for benchmarks."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from observers.changes import records_table
from observers.origin import Origin


def made_up_records(n: int, *, kinds: Sequence[str] = ("BlobCreated",)) -> list[dict[str, Any]]:
    """`n` records of the event types `kinds` in turn."""
    return [
        {
            "schemaVersion": 5,
            "topic": "/subscriptions/warm-up/resourceGroups/warm-up/providers/Microsoft.Storage",
            "subject": f"/blobServices/default/containers/warm-up/blobs/dir/{i % 97}/b{i}.bin",
            "eventType": kinds[i % len(kinds)],
            "eventTime": f"2026-01-01T00:00:{i % 60:02d}.{i % 10_000_000:07d}Z",
            "id": str(uuid.UUID(int=i)),
            "data": {
                "api": "PutBlob",
                "clientRequestId": str(uuid.UUID(int=i + 1)),
                "requestId": str(uuid.UUID(int=i + 2)),
                "etag": f"0x{i:015X}",
                "contentType": "application/octet-stream",
                "contentLength": i,
                "blobType": "BlockBlob",
                "url": f"http://127.0.0.1:10000/warm-up/dir/{i % 97}/b{i}.bin",
                "sequencer": f"{i:048x}",
                "blobTagsUpdated": {"current": {"n": str(i % 7)}} if i % 5 == 0 else None,
                "storageDiagnostics": {"bid": str(uuid.UUID(int=i + 3)), "seq": f"({i},0,0,0)"},
            },
        }
        for i in range(n)
    ]


def made_up_changes(n: int, *, shard: str = "00", start: int = 0) -> pa.Table:
    """`n` change log rows of lease `shard` shaped like real ones, at positions `start`..."""
    positions = [f"{start + i:038d}" for i in range(n)]
    origin = Origin(shard, "idx/segments/2026/01/01/0000/meta.json")
    return records_table(made_up_records(n), positions, origin)
