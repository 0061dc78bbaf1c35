"""What configures a lease table, apart from the store itself: the names Azure Tables accepts,
our default table, and the client's options. Light to import (no Azure SDK), so that the CLI can
declare its options and check names before any client loads."""

from __future__ import annotations

import re
from typing import Any

from leases.errors import LeaseStoreMisconfigured

# One store request may take this long before its outcome counts as unknown (then re-read).
DEFAULT_REQUEST_TIMEOUT_S = 5.0

_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,62}$")
_BAD_KEY_CHARS = re.compile(r"[/\\#?\x00-\x1f\x7f-\x9f]")

DEFAULT_TABLE = "cfpleases"

# Table partitions a new processor's leases are spread over (fixed when it is created: see
# `leases.store.table_lease_rows`). Four keep 1,000 hosts of 10 leases each within one partition's
# target.
DEFAULT_LEASE_PARTITIONS = 4
MAX_LEASE_PARTITIONS = 64
_PARTITION_SUFFIX = re.compile(r"~\d+$")


def check_names(table: str, processor: str) -> None:
    """Raise `LeaseStoreMisconfigured` for a table or processor name Azure Tables would refuse."""
    if not _TABLE_NAME.match(table):
        raise LeaseStoreMisconfigured(
            f"lease table name {table!r} must be 3-63 letters and digits, starting with a letter"
        )
    if not processor or len(processor) > 255 or _BAD_KEY_CHARS.search(processor):
        raise LeaseStoreMisconfigured(
            f"processor name {processor!r} must be 1-255 characters without / \\ # ? or controls"
        )
    if _PARTITION_SUFFIX.search(processor):
        raise LeaseStoreMisconfigured(
            f"processor name {processor!r} must not end in ~ and digits: that names the lease "
            "partitions of another processor"
        )


def client_options(request_timeout_s: float) -> dict[str, Any]:
    """Keyword arguments for the `TableClient` of a lease store, however it authenticates."""
    return {
        "retry_total": 0,  # retries are ours: a conditional write is never blindly repeated
        "connection_timeout": request_timeout_s,
        "read_timeout": request_timeout_s,
    }
