"""Delta's refusals of a commit, told apart: which to run again, and which say "fenced".

Delta commits optimistically: a commit that finds another one changed what it read is refused
with a concurrent-modification error (a Java exception in an embedded session; over Spark
Connect, a generic error whose text names it). Most are worth running again on the newer table.
One is not, for a lease's writes: `ConcurrentTransactionException` on the lease's own app id
means another writer set it since this one started (`fence.py`)."""

from __future__ import annotations

import re

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

CONFLICT = re.compile(
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException|DELTA_CONCURRENT|DELTA_METADATA_CHANGED"
    r"|DELTA_PROTOCOL_CHANGED"
)
TRANSACTION_CONFLICT = re.compile(r"ConcurrentTransactionException|DELTA_CONCURRENT_TRANSACTION")
COMMIT_ATTEMPTS = 12


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def is_conflict(error: BaseException) -> bool:
    """A Delta concurrent-modification error (in an embedded session or over Spark Connect)."""
    return bool(CONFLICT.search(_text(error)))


def is_transaction_conflict(error: BaseException) -> bool:
    """Another commit set an app id this one read (`txnAppId`): for a lease's write, a fence."""
    return bool(TRANSACTION_CONFLICT.search(_text(error)))


def is_retryable_conflict(error: BaseException) -> bool:
    """A conflict worth running again as it is: any but another writer of the same app id."""
    return is_conflict(error) and not is_transaction_conflict(error)


def conflict_retrying(attempts: int = COMMIT_ATTEMPTS, *, fenced: bool = False) -> Retrying:
    """Bounded, jittered retries of Delta commit conflicts; every other error propagates. With
    `fenced`, a conflict on the write's own app id propagates too."""
    return Retrying(
        retry=retry_if_exception(is_retryable_conflict if fenced else is_conflict),
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.1, max=5.0),
        reraise=True,
    )
