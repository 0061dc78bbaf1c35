"""Errors of the lease store. A lost race is not an error: store methods return None for it."""

from __future__ import annotations


class LeaseError(Exception):
    """Base of every lease-store error."""

    retryable = False


class LeaseStoreUnavailable(LeaseError):
    """The store did not answer or answered with a transient failure (timeout, 5xx, 429)."""

    retryable = True


class LeaseStoreMisconfigured(LeaseError):
    """The store refused us for a reason retrying cannot fix (bad credentials, bad table name)."""


class LeaseCorrupt(LeaseError):
    """A row of the lease table does not have the shape this version writes."""

    def __init__(self, table: str, key: str, problem: str) -> None:
        super().__init__(f"lease table {table}, lease {key}: {problem}")
        self.table = table
        self.key = key
        self.problem = problem
