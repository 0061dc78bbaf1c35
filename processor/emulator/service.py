"""Opening the emulator's storage account, checked to be on loopback, and wiping it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import BlobServiceClient

from processor import connection
from processor.changefeed.errors import UnsafeEndpoint
from processor.changefeed.storage.layout import CONTAINER


@asynccontextmanager
async def open_service(conn_str: str) -> AsyncIterator[BlobServiceClient]:
    """A blob service client for `conn_str`, refused unless its endpoint is loopback."""
    info = connection.parse(conn_str)
    if not connection.is_loopback_endpoint(info.blob_endpoint):
        raise UnsafeEndpoint(
            f"refusing to emulate against {info.blob_endpoint}: only loopback endpoints (Azurite) "
            "may receive an emulated $blobchangefeed"
        )
    # loopback: no proxy applies, so none is looked up in the environment (aiohttp does that
    # in a thread, for every request)
    async with BlobServiceClient.from_connection_string(
        conn_str, use_env_settings=False
    ) as service:
        yield service


async def reset_account(service: BlobServiceClient, containers: list[str]) -> None:
    """Delete every blob of the feed and of the emulator's containers (loopback only)."""
    for name in [CONTAINER, *containers]:
        client = service.get_container_client(name)
        try:
            names = [b.name async for b in client.list_blobs()]
        except ResourceNotFoundError:
            continue
        for blob in names:
            with contextlib.suppress(ResourceNotFoundError):
                await client.delete_blob(blob, delete_snapshots="include")
