"""The feed's only door to Azure Storage: `$blobchangefeed` reads with retries and typed errors.

Azure SDK exceptions never leave this module. Transient failures (timeouts, dropped connections,
5xx, 429) become `FeedUnavailable` and are retried here with jittered exponential backoff
(tenacity), a bounded number of times; the SDK's own retry policy is turned off so that there is
exactly one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobProperties
from azure.storage.blob.aio import BlobServiceClient, ContainerClient
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from processor import connection
from processor.changefeed.errors import (
    FeedError,
    FeedNotEnabled,
    FeedUnavailable,
    MissingChunkError,
)
from processor.changefeed.storage.layout import CONTAINER

T = TypeVar("T")

RETRY_ATTEMPTS = 6
RETRY_MAX_WAIT_S = 8.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
WHOLE_RANGE = 64 << 20  # bytes above any ranged GET of a reader (its --read-size, a block)


class RequestCount:
    """Every HTTP request a `FeedStorage` sends (each attempt, each page of a listing), by
    kind: `list`, `get` (reads of manifests and chunk ranges), or another method. What a host
    costs in storage transactions (`cfp_storage_requests_total`)."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()

    def __call__(self, request: Any) -> None:  # the SDK's raw_request_hook: a PipelineRequest
        http = request.http_request
        self.by_kind["list" if "comp=list" in http.url else http.method.lower()] += 1

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


@dataclass(frozen=True, slots=True)
class BlobInfo:
    name: str
    size: int


def _translate(e: BaseException, path: str, endpoint: str = "storage") -> BaseException:
    """Map an SDK or transport exception to our error types (others pass through unchanged)."""
    if isinstance(e, ResourceNotFoundError):
        if getattr(e, "error_code", None) == "ContainerNotFound":
            return FeedNotEnabled(f"the account has no {CONTAINER} container")
        return MissingChunkError(path, "not found")
    if isinstance(e, ClientAuthenticationError) and e.status_code is None:
        # no request was sent: Entra ID gave no token (no network, no identity on this machine)
        return FeedUnavailable(f"{path}: no Microsoft Entra ID token for {endpoint}: {e.message}")
    if isinstance(e, HttpResponseError) and e.status_code is None:
        # no HTTP answer at all: a transport failure the SDK wrapped
        return FeedUnavailable(
            f"{path}: no answer from {endpoint}: {type(e).__name__}: {e.message}"
        )
    if isinstance(e, HttpResponseError):
        status = e.status_code
        if status in TRANSIENT_STATUS:
            return FeedUnavailable(f"{path}: storage answered {status}")
        return FeedError(f"{path}: storage answered {status} ({e.reason})")
    if isinstance(
        e, ServiceRequestError | ServiceResponseError | aiohttp.ClientError | OSError | TimeoutError
    ):
        return FeedUnavailable(f"{path}: {type(e).__name__}: {e}")
    return e


def _is_retryable(e: BaseException) -> bool:
    return bool(getattr(e, "retryable", False))


class FeedStorage:
    """Async reads of `$blobchangefeed`, shared by every reader of one account in a process.

    Resource handling: `close()` (or `async with`) closes the underlying HTTP session.
    Errors: `FeedUnavailable` after the retries are spent, `MissingChunkError` for a blob that
    does not exist, `FeedNotEnabled` when the container itself is missing.
    """

    def __init__(
        self,
        container: ContainerClient,
        *,
        attempts: int = RETRY_ATTEMPTS,
        owner: BlobServiceClient | None = None,
        requests: RequestCount | None = None,
    ) -> None:
        self._container = container
        self._attempts = attempts
        self._owner = owner
        self.requests = requests or RequestCount()  # counted when made by from_connection_string

    @classmethod
    def from_connection_string(cls, conn_str: str, **kwargs: int) -> FeedStorage:
        requests = RequestCount()
        service = connection.blob_service(
            conn_str,
            retry_total=0,
            connection_timeout=10,
            read_timeout=60,
            raw_request_hook=requests,
            max_chunk_get_size=WHOLE_RANGE,  # what `chunks()` hands out is not cut (copied)
        )
        container = service.get_container_client(CONTAINER)
        return cls(container, owner=service, requests=requests, **kwargs)

    async def __aenter__(self) -> FeedStorage:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._container.close()
        if self._owner is not None:
            await self._owner.close()

    async def _call(self, path: str, op: Callable[[], Awaitable[T]]) -> T:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_is_retryable),
            stop=stop_after_attempt(self._attempts),
            wait=wait_random_exponential(multiplier=0.1, max=RETRY_MAX_WAIT_S),
            reraise=True,
        ):
            with attempt:
                try:
                    return await op()
                except (asyncio.CancelledError, FeedError):
                    raise
                except Exception as e:
                    raise _translate(e, path, self._container.primary_hostname) from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def read_document(self, path: str) -> bytes | None:
        """A whole small blob (a manifest), or None when it does not exist."""

        async def op() -> bytes:
            stream = await self._container.download_blob(path)
            return await stream.readall()

        try:
            return await self._call(path, op)
        except MissingChunkError:
            return None

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        """`length` bytes of `path` from `offset` (fewer if the blob is shorter)."""

        async def op() -> bytes:
            stream = await self._container.download_blob(path, offset=offset, length=length)
            # the response's bytes as the SDK joined them: its `readall` copies them again, into
            # a BytesIO, with the interpreter held (a tenth of a read's time in the interpreter)
            parts = [part async for part in stream.chunks()]
            return parts[0] if len(parts) == 1 else b"".join(parts)

        return await self._call(path, op)

    async def list_blobs(self, prefix: str) -> list[BlobInfo]:
        """Every blob under `prefix` with its current size, in name order."""

        async def op() -> list[BlobInfo]:
            return [
                BlobInfo(b.name, b.size or 0)
                async for b in self._container.list_blobs(name_starts_with=prefix)
            ]

        return await self._call(prefix, op)

    async def list_containers(self) -> list[str]:
        """The account's containers that hold users' blobs (not `$`-prefixed), in name order."""
        assert self._owner is not None, "needs the account's service client"
        service = self._owner

        async def op() -> list[str]:
            names = [c.name async for c in service.list_containers()]
            return sorted(str(n) for n in names if not str(n).startswith("$"))

        return await self._call("(containers)", op)

    async def list_blob_page(
        self, container: str, marker: str | None, *, page_size: int = 5000
    ) -> tuple[list[BlobProperties], str | None]:
        """One page of `container`'s blobs (name order, with their tags) and the marker of the
        next page (None after the last). A container deleted meanwhile has no blobs."""
        assert self._owner is not None, "needs the account's service client"
        client = self._owner.get_container_client(container)

        async def op() -> tuple[list[BlobProperties], str | None]:
            pages = client.list_blobs(include=["tags"], results_per_page=page_size).by_page(
                continuation_token=marker
            )
            try:
                page = await anext(pages, None)
                blobs = [] if page is None else [b async for b in page]
            except ResourceNotFoundError:
                return [], None
            following: str | None = getattr(pages, "continuation_token", None)
            return blobs, following or None

        return await self._call(container, op)

    async def list_folders(self, prefix: str) -> list[str]:
        """The immediate "folders" under `prefix` (delimiter `/`), in name order."""

        async def op() -> list[str]:
            return [
                p.name
                async for p in self._container.walk_blobs(name_starts_with=prefix, delimiter="/")
                if p.name.endswith("/")
            ]

        return await self._call(prefix, op)
