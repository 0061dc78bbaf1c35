"""Storage connection strings: the local default, the account name, and the loopback check.

Connection strings carry account keys: nothing here ever logs or formats one whole. Use
`describe()` for a safe one-line description.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from processor.redact import register_connection_string

# Azurite's well-known development account (published in Azurite's documentation; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
ENV_VAR = "CFP_CONNECTION_STRING"


def azurite_connection_string(
    host: str = "127.0.0.1", blob_port: int = 10000, table_port: int = 10002
) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{host}:{blob_port}/{AZURITE_ACCOUNT};"
        f"TableEndpoint=http://{host}:{table_port}/{AZURITE_ACCOUNT};"
    )


DEFAULT_CONNECTION_STRING = azurite_connection_string()


def resolve(flag_value: str | None) -> str:
    """The flag if given, else `CFP_CONNECTION_STRING`, else the local Azurite account. Its key
    or SAS is registered with the secret filter of logs and errors."""
    conn_str = flag_value or os.environ.get(ENV_VAR) or DEFAULT_CONNECTION_STRING
    register_connection_string(conn_str)
    return conn_str


def resolve_lease(flag_value: str | None, feed_conn_str: str) -> str:
    """`--lease-connection-string` if given (its secrets registered too), else the feed's."""
    register_connection_string(flag_value)
    return flag_value or feed_conn_str


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    account: str
    blob_endpoint: str

    def describe(self) -> str:
        """A description safe to log: account and endpoint, never the key."""
        return f"account={self.account} blob={self.blob_endpoint}"


def parse(conn_str: str) -> ConnectionInfo:
    """Account name and blob endpoint of a connection string.

    Raises:
        ValueError: no account name and no blob endpoint can be found (the message never
            repeats the string itself, which may hold a key).
    """
    parts: dict[str, str] = {}
    for item in conn_str.split(";"):
        key, sep, value = item.partition("=")
        if sep:
            parts[key.strip().lower()] = value.strip()
    account = parts.get("accountname", "")
    endpoint = parts.get("blobendpoint", "")
    if not endpoint and account:
        protocol = parts.get("defaultendpointsprotocol", "https")
        suffix = parts.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{account}.blob.{suffix}"
    if not endpoint:
        raise ValueError("connection string has neither AccountName nor BlobEndpoint")
    if not account:
        path = urlsplit(endpoint).path.strip("/")
        account = path.split("/", 1)[0] if path else (urlsplit(endpoint).hostname or "")
    return ConnectionInfo(account=account, blob_endpoint=endpoint.rstrip("/"))


def is_loopback_endpoint(endpoint: str) -> bool:
    """True only for endpoints on the loopback interface (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
