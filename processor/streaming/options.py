"""The source's options, read once into one frozen object with errors that name the option.

Names follow Spark's sources: `startingOffsets`, `startingTimestamp`, `endingTimestamp` and
`failOnDataLoss` (Kafka), `maxBytesPerTrigger` and `maxFilesPerTrigger` (Delta),
`maxEventsPerTrigger` (Event Hubs). Streaming readers get no filter pushdown, so the filters of
`cfp run` are options too. Spark hands options over case-insensitively; so does this module.

Credentials: `connectionString`; or `accountUrl` with a `sas` (or the SAS in the URL's query);
or `accountUrl` alone for Microsoft Entra ID; or none, then `CFP_CONNECTION_STRING` (set it on
the driver and the executors to keep the secret out of the query's options altogether).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal
from urllib.parse import urlsplit

from processor import connection
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition
from processor.changefeed.sdk_token import from_sdk_token, is_sdk_token, url_host
from processor.changefeed.selection import EventFilter, TimeRange, parse_event_time

DEFAULT_PARTITION_BYTES = 64 << 20
DEFAULT_STREAM_NAME = "blobchangefeed"
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

Starting = Literal["earliest", "latest"] | FeedPosition
_Getter = Callable[[str], str | None]  # an option's value by name, None when not given


class SourceOptionError(ValueError):
    """An option of the `blobchangefeed` source that cannot be used, named with its value
    (never the value of a credential)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    conn_str: str = field(repr=False)  # holds a key or SAS: never logged, never in an offset
    account: str
    blob_host: str  # the account's `UrlHost`, which SDK tokens name
    starting: Starting = "earliest"
    events: EventFilter = field(default_factory=EventFilter)
    max_events: int | None = None
    max_bytes: int | None = None
    max_files: int | None = None
    fail_on_data_loss: bool = True
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    stream_name: str = DEFAULT_STREAM_NAME

    @property
    def window(self) -> TimeRange:
        return self.events.window

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Errors: `SourceOptionError`."""
        given = {str(k).lower(): str(v) for k, v in options.items()}
        known = {name.lower() for name in KNOWN}
        unknown = sorted(k for k in given if k not in known and k != "path")
        if unknown:
            raise SourceOptionError(
                f"blobchangefeed: unknown option(s) {', '.join(unknown)}; known: "
                + ", ".join(sorted(KNOWN))
            )

        def get(name: str) -> str | None:
            value = given.get(name.lower())
            return None if value is None or not value.strip() else value.strip()

        conn_str = _credentials(get)
        try:
            info = connection.parse(conn_str)
        except ValueError as e:
            raise SourceOptionError(f"blobchangefeed: credentials: {e}") from None
        if get("endingTimestamp") and streaming:
            raise SourceOptionError(
                "blobchangefeed: endingTimestamp is for batch reads (spark.read); a stream "
                "has no end"
            )
        window = TimeRange(_time(get, "startingTimestamp"), _time(get, "endingTimestamp"))
        if window.start and window.end and window.end <= window.start:
            raise SourceOptionError(
                "blobchangefeed: endingTimestamp must be after startingTimestamp"
            )
        change = ChangeFilter.of(
            containers=_names(get("containers")),
            blob_prefix=get("blobPrefix") or "",
            event_types=_names(get("eventTypes")),
            blob_types=_names(get("blobTypes")),
        )
        host = url_host(info.blob_endpoint)
        return cls(
            conn_str=conn_str,
            account=info.account,
            blob_host=host,
            starting=_starting(get("startingOffsets"), info.account, host),
            events=EventFilter(change, window, _flag(get, "includeControl", False)),
            max_events=_count(get, "maxEventsPerTrigger"),
            max_bytes=_bytes(get, "maxBytesPerTrigger"),
            max_files=_count(get, "maxFilesPerTrigger"),
            fail_on_data_loss=_flag(get, "failOnDataLoss", True),
            partition_bytes=_bytes(get, "maxPartitionBytes") or DEFAULT_PARTITION_BYTES,
            stream_name=get("streamName") or DEFAULT_STREAM_NAME,
        )


KNOWN = (
    "connectionString",
    "accountUrl",
    "sas",
    "startingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "maxEventsPerTrigger",
    "maxBytesPerTrigger",
    "maxFilesPerTrigger",
    "maxPartitionBytes",
    "failOnDataLoss",
    "containers",
    "blobPrefix",
    "eventTypes",
    "blobTypes",
    "includeControl",
    "streamName",
)
"""Every option the source takes (Spark hands them over case-insensitively)."""

SECRET_OPTIONS = ("connectionString", "sas")
"""Options whose values are secrets; `spark.sql.redaction.options.regex` must match them."""


def _credentials(get: _Getter) -> str:
    conn_str, url, sas = get("connectionString"), get("accountUrl"), get("sas")
    if conn_str and (url or sas):
        raise SourceOptionError(
            "blobchangefeed: give either connectionString, or accountUrl (with sas), not both"
        )
    if sas and not url:
        raise SourceOptionError("blobchangefeed: sas needs accountUrl")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceOptionError(
                "blobchangefeed: accountUrl must be the account's blob endpoint "
                "(https://ACCOUNT.blob.core.windows.net)"
            )
        token = (sas or parts.query).lstrip("?")
        endpoint = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
        conn_str = f"BlobEndpoint={endpoint};" + (
            f"SharedAccessSignature={token};" if token else ""
        )
    return connection.resolve(conn_str)  # none given: CFP_CONNECTION_STRING, else Azurite


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _flag(get: _Getter, name: str, default: bool) -> bool:
    value = get(name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SourceOptionError(f"blobchangefeed: {name} must be true or false, not {value!r}")


def _count(get: _Getter, name: str) -> int | None:
    value = get(name)
    if value is None:
        return None
    if not value.isdigit() or int(value) <= 0:
        raise SourceOptionError(f"blobchangefeed: {name} must be a whole number > 0: {value!r}")
    return int(value)


def _bytes(get: _Getter, name: str) -> int | None:
    """A size in bytes, with an optional unit: `1048576`, `512k`, `64m`, `1g`."""
    value = get(name)
    if value is None:
        return None
    m = _SIZE.match(value)
    if m is None or int(m.group(1)) <= 0:
        raise SourceOptionError(
            f"blobchangefeed: {name} must be a size > 0 (bytes, or with k, m, g): {value!r}"
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _time(get: _Getter, name: str) -> datetime | None:
    value = get(name)
    if value is None:
        return None
    try:
        return parse_event_time(value)
    except ValueError:
        raise SourceOptionError(
            f"blobchangefeed: {name} must be an ISO 8601 time (2026-01-31T12:00:00Z): {value!r}"
        ) from None


def _starting(value: str | None, account: str, host: str) -> Starting:
    """`earliest` (the default), `latest`, or a token: a cfp token (`cfp read` prints one) or
    a continuation token of the official SDKs."""
    if value is None or value.lower() == "earliest":
        return "earliest"
    if value.lower() == "latest":
        return "latest"
    try:
        if is_sdk_token(value):
            return from_sdk_token(value, host=host).position
        return FeedPosition.from_token(value, account=account)
    except InvalidContinuation as e:
        raise SourceOptionError(
            f"blobchangefeed: startingOffsets is neither earliest, latest nor a token of "
            f"this account: {e}"
        ) from None
