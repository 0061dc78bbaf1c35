"""The output's container, made by the host before Spark writes into it.

ABFS can make the container itself when it opens the file system, but not in every case: over
the Blob endpoint with a SAS it went on to write into a container that did not exist (Hadoop
3.5 against Azurite: `ContainerNotFound` on the first commit), and two hosts making it at once
made one fail with `ContainerAlreadyExists`. The Python SDK does it the same way for a key, a
SAS and Microsoft Entra ID, with an embedded session or Spark Connect alike.
"""

from __future__ import annotations

from typing import Any

import structlog
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob.aio import BlobServiceClient, ContainerClient
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from observers.builtin.spark.session.output import Output, access_for
from observers.builtin.spark.waits import logged_wait
from observers.errors import PluginLoadError
from observers.options import StorageAccess

log = structlog.get_logger("cfp.spark")

REQUEST_TIMEOUT_S = 30
REFUSED = (401, 403)
# no answer, or the service failing, is tried again for this long, then the host fails to start
# naming the endpoint: a restart of the service or a dropped connection must not stop a host for
# good (4 quick attempts did, once, under the chaos suite)
PATIENCE_S = 90.0


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def blob_endpoint(output: Output, access: StorageAccess) -> str:
    """The Blob endpoint of the output's account: the emulator's, else the `blob.` twin of
    its `dfs.` host (the same suffix in every Azure cloud)."""
    if access.emulator_endpoint:
        return access.emulator_endpoint
    return "https://" + output.host.replace(".dfs.", ".blob.", 1)


async def ensure_container(
    output: Output, access: StorageAccess | None, *, patience_s: float = PATIENCE_S
) -> bool:
    """Make the container of an `abfs[s]://` output unless it exists (nothing for a local
    folder). True when this call made it.

    Errors: `PluginLoadError` naming the container and the endpoint when the account cannot be
    reached, refuses these credentials, or has no such container and these credentials may
    not make it. Credentials that may not make containers but find it there are fine (a
    container-scoped SAS).
    """
    chosen = access_for(output, access)
    if chosen is None:
        return False
    endpoint = blob_endpoint(output, chosen)
    where = f"container {output.container!r} at {endpoint}"
    credential: Any
    if chosen.key:
        credential = AzureNamedKeyCredential(chosen.account, chosen.key)
    elif chosen.sas:
        credential = AzureSasCredential(chosen.sas.lstrip("?"))
    else:
        from azure.identity.aio import DefaultAzureCredential  # noqa: PLC0415 - only if used

        credential = DefaultAzureCredential()
    try:
        async with BlobServiceClient(
            endpoint, credential=credential, retry_total=0, connection_timeout=REQUEST_TIMEOUT_S
        ) as service:
            container = service.get_container_client(output.container)
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_is_transient),
                stop=stop_after_delay(patience_s),
                wait=wait_random_exponential(multiplier=0.5, max=8.0),
                before_sleep=logged_wait("spark.container_unreachable", endpoint=endpoint),
                reraise=True,
            ):
                with attempt:
                    return await _make(container, where=where, auth=chosen.auth, log_as=endpoint)
            raise AssertionError("unreachable")  # pragma: no cover
    except (HttpResponseError, ClientAuthenticationError) as e:
        if getattr(e, "status_code", 401) in REFUSED:
            problem = f"these credentials ({chosen.auth}) were refused: {_first_line(e)}"
        else:
            problem = _first_line(e)
        raise PluginLoadError("spark", f"{where}: {problem}") from e
    except AzureError as e:  # no answer: DNS, connection, timeout
        raise PluginLoadError("spark", f"cannot reach {endpoint}: {_first_line(e)}") from e
    finally:
        if not (chosen.key or chosen.sas):
            await credential.close()


async def _make(container: ContainerClient, *, where: str, auth: str, log_as: str) -> bool:
    try:
        await container.create_container()
    except ResourceExistsError:
        return False
    except HttpResponseError as e:
        if e.status_code not in REFUSED:
            raise
        # may not make containers (a container-scoped SAS): fine if it is there, which listing
        # it tells (a SAS for one container may list it, not read its properties)
        try:
            async for _ in container.list_blob_names(results_per_page=1).by_page():
                break
        except ResourceNotFoundError as missing:
            raise PluginLoadError(
                "spark",
                f"{where} does not exist, and these credentials ({auth}) may not make it: make "
                "the container, or use credentials that may (the account key, an account SAS "
                "allowing create, or the role Storage Blob Data Contributor)",
            ) from missing
        return False
    log.info("spark.container_created", container=container.container_name, endpoint=log_as)
    return True


def _is_transient(error: BaseException) -> bool:
    """No answer, or the service busy or failing: worth another try."""
    if isinstance(error, HttpResponseError):
        return (
            error.status_code is None or error.status_code in (408, 429) or error.status_code >= 500
        )
    return isinstance(error, ServiceRequestError | ServiceResponseError)
