"""The emulated account's own containers and blobs, on which the workload's operations happen.

The feed must explain what storage really did, so each operation runs against Azurite and its
record carries the ETag, request id and snapshot that storage answered with (or, with
`feed_only`, made-up answers in the service's shape, and the blobs are left alone).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobProperties, ContentSettings, StandardBlobTier
from azure.storage.blob.aio import BlobClient, BlobServiceClient

from processor.emulator.records import Outcome
from processor.emulator.workload import BlobModel, Op, OpKind


def _etag(value: object) -> str:
    return str(value or "").strip('"')


def _leaves(op: Op) -> tuple[int, str]:
    """The size and content type of the blob as `op` leaves it (a deleted one: 0 bytes)."""
    if op.kind is OpKind.CREATE:
        return op.size, op.content_type
    prev = op.previous
    assert prev is not None
    if op.kind is OpKind.DELETE:
        return 0, prev.content_type
    if op.kind is OpKind.SET_PROPERTIES:
        return prev.size, op.content_type
    return prev.size, prev.content_type


def _content(op: Op, counter: int) -> bytes:
    """Cheap deterministic content: the blob's name (and `counter`) repeated to its size."""
    seed = f"{op.container}/{op.name}#{counter}".encode()
    return (seed * (op.size // max(len(seed), 1) + 1))[: op.size]


class AccountBlobs:
    """The blobs of the account's workload containers, as the emulator changes them.

    Driven by `Emulator`: `prepare()` once at setup, then `apply()` for every operation,
    concurrently within a window of distinct blobs.
    """

    def __init__(
        self, service: BlobServiceClient, containers: Sequence[str], *, feed_only: bool
    ) -> None:
        self._service = service
        self._containers = tuple(containers)
        self._feed_only = feed_only
        # one client per blob: building one costs about as much CPU as the request it sends
        self._blobs: dict[tuple[str, str], BlobClient] = {}
        self._made_up_etags = itertools.count(1)

    async def prepare(self) -> dict[tuple[str, str], BlobModel]:
        """Create the containers that are missing; return the blobs they already hold."""
        for name in self._containers:
            with contextlib.suppress(ResourceExistsError):
                await self._service.create_container(name)
        blobs: dict[tuple[str, str], BlobModel] = {}
        for name in self._containers:
            client = self._service.get_container_client(name)
            props: BlobProperties
            async for props in client.list_blobs(include=["tags"]):
                ctype = props.content_settings.content_type or "application/octet-stream"
                tier = str(props.blob_tier or "Hot")
                blobs[(name, props.name)] = BlobModel(
                    ctype, props.size, tier, dict(props.tags or {})
                )
        return blobs

    async def apply(self, op: Op, *, counter: int) -> Outcome:
        """Run `op` (a created blob's content depends on `counter`): what storage answered."""
        if self._feed_only:
            etag, request_id, snapshot = self._made_up(op)
        else:
            etag, request_id, snapshot = await self._perform(op, counter)
        size, content_type = _leaves(op)
        return Outcome(etag, size, content_type, request_id, snapshot=snapshot)

    async def _perform(self, op: Op, counter: int) -> tuple[str, str, str | None]:
        """Run `op` on its blob: the ETag, request id and snapshot storage answered with."""
        blob = self._blobs.get((op.container, op.name))
        if blob is None:
            blob = self._blobs[op.container, op.name] = self._service.get_blob_client(
                op.container, op.name
            )
        if op.kind is OpKind.CREATE:
            r = await blob.upload_blob(
                _content(op, counter),
                overwrite=True,
                content_settings=ContentSettings(content_type=op.content_type),
            )
            return _etag(r.get("etag")), str(r.get("request_id", "")), None
        if op.kind is OpKind.DELETE:
            props = await blob.get_blob_properties()
            await blob.delete_blob(delete_snapshots="include")
            return _etag(props.etag), "", None
        if op.kind is OpKind.SET_METADATA:
            r = await blob.set_blob_metadata(dict(op.metadata))
            return _etag(r.get("etag")), "", None
        if op.kind is OpKind.SET_PROPERTIES:
            r = await blob.set_http_headers(ContentSettings(content_type=op.content_type))
            return _etag(r.get("etag")), "", None
        if op.kind is OpKind.SNAPSHOT:
            r = await blob.create_snapshot()
            return _etag(r.get("etag")), "", str(r.get("snapshot") or "") or None
        if op.kind is OpKind.SET_TIER:
            await blob.set_standard_blob_tier(StandardBlobTier(op.tier))
        else:
            await blob.set_blob_tags(dict(op.tags))
        props = await blob.get_blob_properties()
        return _etag(props.etag), "", None

    def _made_up(self, op: Op) -> tuple[str, str, str | None]:
        """What storage would have answered, without asking it (`feed_only`): a new ETag in the
        service's shape, a request id for a create (as the service's reply has), a snapshot
        time for a snapshot."""
        n = next(self._made_up_etags)
        request_id = f"00000000-0000-4000-8000-{n:012x}" if op.kind is OpKind.CREATE else ""
        snapshot = (
            f"2026-01-01T00:00:00.{n % 10_000_000:07d}Z" if op.kind is OpKind.SNAPSHOT else None
        )
        return f"0x8DE{n:013X}", request_id, snapshot
