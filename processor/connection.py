"""Storage connection strings: the local default, the account name, the loopback check, and the
clients built from them.

Connection strings carry account keys: nothing here ever logs or formats one whole. Use
`describe()` for a safe one-line description.

A connection string with neither `AccountKey` nor `SharedAccessSignature` (for example
`BlobEndpoint=https://acct.blob.core.windows.net;TableEndpoint=https://acct.table.core.windows.net`
or just `AccountName=acct`) means Microsoft Entra ID: the clients authenticate with
azure-identity's `DefaultAzureCredential` (managed identity, workload identity, environment
variables, Azure CLI ...), one credential shared by the process.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from leases.store.table_settings import DEFAULT_REQUEST_TIMEOUT_S, check_names, client_options
from processor.redact import register_connection_string

# The Azure SDKs load when a client is made, not with this module: every `cfp` command reads
# connection strings, and `cfp --help` should not wait a second for the SDKs to import.
if TYPE_CHECKING:
    from azure.data.tables.aio import TableClient
    from azure.identity.aio import DefaultAzureCredential
    from azure.storage.blob.aio import BlobServiceClient
    from azure.storage.queue.aio import QueueClient

    from leases import TableLeaseStore
    from observers.options import StorageAccess

# Azurite's well-known development account (published in Azurite's documentation; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
ENV_VAR = "CFP_CONNECTION_STRING"


def azurite_connection_string(
    host: str = "127.0.0.1",
    blob_port: int = 10000,
    table_port: int = 10002,
    queue_port: int = 10001,
) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{host}:{blob_port}/{AZURITE_ACCOUNT};"
        f"QueueEndpoint=http://{host}:{queue_port}/{AZURITE_ACCOUNT};"
        f"TableEndpoint=http://{host}:{table_port}/{AZURITE_ACCOUNT};"
    )


DEFAULT_CONNECTION_STRING = azurite_connection_string()


def resolve(flag_value: str | None) -> str:
    """The flag if given, else `CFP_CONNECTION_STRING`, else the local Azurite account. Its key
    or SAS is registered with the secret filter of logs and errors."""
    conn_str = flag_value or os.environ.get(ENV_VAR) or DEFAULT_CONNECTION_STRING
    register_connection_string(conn_str)
    return conn_str


def resolve_other(flag_value: str | None, feed_conn_str: str) -> str:
    """The connection string of another account (`--lease-connection-string`,
    `--output-connection-string`) if given, its secrets registered too; else the feed's."""
    register_connection_string(flag_value)
    return flag_value or feed_conn_str


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    account: str
    blob_endpoint: str
    table_endpoint: str = ""
    queue_endpoint: str = ""
    has_secret: bool = True  # a key or SAS; without one, Entra ID (DefaultAzureCredential)

    def describe(self) -> str:
        """A description safe to log: account and endpoint, never the key."""
        return f"account={self.account} blob={self.blob_endpoint}"


def _fields(conn_str: str) -> dict[str, str]:
    """The `Key=Value` fields of a connection string, keys lowercased."""
    parts: dict[str, str] = {}
    for item in conn_str.split(";"):
        key, sep, value = item.partition("=")
        if sep:
            parts[key.strip().lower()] = value.strip()
    return parts


def parse(conn_str: str) -> ConnectionInfo:
    """Account name and blob endpoint of a connection string.

    Raises:
        ValueError: no account name and no blob endpoint can be found (the message never
            repeats the string itself, which may hold a key).
    """
    parts = _fields(conn_str)
    account = parts.get("accountname", "")
    protocol = parts.get("defaultendpointsprotocol", "https")
    suffix = parts.get("endpointsuffix", "core.windows.net")
    endpoint = parts.get("blobendpoint", "")
    if not endpoint and account:
        endpoint = f"{protocol}://{account}.blob.{suffix}"
    if not endpoint:
        raise ValueError("connection string has neither AccountName nor BlobEndpoint")
    if not account:
        path = urlsplit(endpoint).path.strip("/")
        host = urlsplit(endpoint).hostname or ""
        account = path.split("/", 1)[0] if path else host.split(".", 1)[0]
    table, queue = (
        parts.get(f"{service}endpoint", "")
        or (
            endpoint.replace(".blob.", f".{service}.", 1)
            if ".blob." in endpoint
            else f"{protocol}://{account}.{service}.{suffix}"
        )
        for service in ("table", "queue")
    )
    return ConnectionInfo(
        account=account,
        blob_endpoint=endpoint.rstrip("/"),
        table_endpoint=table.rstrip("/"),
        queue_endpoint=queue.rstrip("/"),
        has_secret=bool(parts.get("accountkey") or parts.get("sharedaccesssignature")),
    )


def storage_access(conn_str: str) -> StorageAccess:
    """How Spark (ABFS) and delta-rs reach the account of `conn_str`: its key or SAS (neither:
    Entra ID), and its blob endpoint when that is an emulator on loopback."""
    from observers.options import StorageAccess  # noqa: PLC0415

    info, fields = parse(conn_str), _fields(conn_str)
    return StorageAccess(
        account=info.account,
        key=fields.get("accountkey") or None,
        sas=fields.get("sharedaccesssignature") or None,
        emulator_endpoint=info.blob_endpoint if is_loopback_endpoint(info.blob_endpoint) else None,
    )


_credential: DefaultAzureCredential | None = None


def token_credential() -> DefaultAzureCredential:
    """The process's one `DefaultAzureCredential` (made on first use, closed by
    `close_credentials`)."""
    global _credential  # noqa: PLW0603 - one credential per process, like one token cache
    if _credential is None:
        from azure.identity.aio import DefaultAzureCredential  # noqa: PLC0415 - only if used

        _credential = DefaultAzureCredential()
    return _credential


async def close_credentials() -> None:
    global _credential  # noqa: PLW0603
    if _credential is not None:
        await _credential.close()
        _credential = None


def blob_service(conn_str: str, **kwargs: Any) -> BlobServiceClient:
    """A Blob service client: with the string's key or SAS, else with Entra ID."""
    from azure.storage.blob.aio import BlobServiceClient  # noqa: PLC0415

    info = parse(conn_str)
    if info.has_secret:
        return BlobServiceClient.from_connection_string(conn_str, **kwargs)
    return BlobServiceClient(info.blob_endpoint, credential=token_credential(), **kwargs)


def table_client(conn_str: str, table: str, **kwargs: Any) -> TableClient:
    """A Table client for `table`: with the string's key or SAS, else with Entra ID."""
    from azure.data.tables.aio import TableClient  # noqa: PLC0415

    info = parse(conn_str)
    if info.has_secret:
        return TableClient.from_connection_string(conn_str, table_name=table, **kwargs)
    return TableClient(
        info.table_endpoint, table_name=table, credential=token_credential(), **kwargs
    )


def queue_client(conn_str: str, queue: str, **kwargs: Any) -> QueueClient:
    """A Queue client for `queue`: with the string's key or SAS, else with Entra ID. It
    neither encodes nor decodes message text: hints decode their bodies themselves."""
    from azure.storage.queue.aio import QueueClient  # noqa: PLC0415

    info = parse(conn_str)
    if info.has_secret:
        return QueueClient.from_connection_string(conn_str, queue_name=queue, **kwargs)
    return QueueClient(
        info.queue_endpoint, queue_name=queue, credential=token_credential(), **kwargs
    )


def is_loopback_endpoint(endpoint: str) -> bool:
    """True only for endpoints on the loopback interface (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lease_store(
    conn_str: str,
    *,
    table: str,
    processor: str,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> TableLeaseStore:
    """The lease store of `processor` in `table` of the account `conn_str` names."""
    from leases.store.table_lease_store import TableLeaseStore  # noqa: PLC0415

    check_names(table, processor)
    client = table_client(conn_str, table, **client_options(request_timeout_s))
    return TableLeaseStore(client, processor=processor, request_timeout_s=request_timeout_s)
