"""Telling a lost Spark Connect session from a Spark call that failed (blocking helpers).

A session is lost when no server answers at its address (the server was killed, its machine is
gone) or when the server that answers does not know it (a new server on the same port: PySpark
then closes the session for good, `NO_ACTIVE_SESSION` on every call after). Any other error is
Spark's answer to the call (a conflict, a missing table), which a working session gives; when an
error says neither, asking the server something cheap tells (`answers`).

PySpark's client retries a server that does not answer for about ten minutes by default (15
tries, up to a minute apart: 611 s measured on a killed server), in the calling thread: a host
would sit that long in a write. `limit_retries` makes it give up within seconds; coming back is
the host's business (`link.py`), which tries every server it knows with its own backoff.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# PySpark's retries of a call whose server does not answer: about 1.5 s in all, enough for a
# connection dropped once; a server that is gone is the link's to find again
MAX_RETRIES, FIRST_BACKOFF_MS, MAX_BACKOFF_MS = 3, 100, 1000
# error conditions of a session that is gone: closed by the client, or unknown to the server
LOST_CONDITIONS = ("NO_ACTIVE_SESSION", "INVALID_HANDLE.SESSION")
# gRPC statuses of a call that reached no server, or was cut off from it
LOST_STATUSES = frozenset({"UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED"})
# a server that answers with another server-side session id than before: a new server
CHANGED_SERVER = "server side session id"
PROBE_KEY = "spark.sql.session.timeZone"  # every session of ours sets it (`session.SQL_CONF`)


def limit_retries(session: Any) -> None:
    """Make a Spark Connect session give up on a server that does not answer within seconds."""
    from pyspark.sql.connect.client.retries import DefaultPolicy  # noqa: PLC0415

    policy = DefaultPolicy(
        max_retries=MAX_RETRIES,
        initial_backoff=FIRST_BACKOFF_MS,
        max_backoff=MAX_BACKOFF_MS,
        backoff_multiplier=4.0,
    )
    session.client.set_retry_policies([policy])


def is_lost(error: BaseException) -> bool:
    """Whether `error` (or what caused it) says the session is gone: no server answered, or one
    that does not know the session."""
    for e in _chain(error):
        condition = _condition(e)
        if condition is not None and condition.startswith(LOST_CONDITIONS):
            return True
        text = str(e)
        if _status(e) in LOST_STATUSES or CHANGED_SERVER in text or LOST_CONDITIONS[1] in text:
            return True  # (a call cut off by a new server says so in its text only)
    return False


def answers(session: Any) -> bool:
    """Whether the session's server answers a cheap call, and knows the session (blocking; as
    long as the session's retries take when it does not)."""
    try:
        session.conf.get(PROBE_KEY)
    except Exception:
        return False
    return True


def close_quietly(session: Any) -> None:
    """Close a lost session's channel (blocking): calls still waiting on it end at once, with
    an error, instead of waiting for a server that is gone. Never raises."""
    try:
        session.client.close()
    except Exception:  # a channel already closed, or a session that is not Connect's
        return


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of an error's text (gRPC's are long), or its type's name."""
    text = str(error).strip()
    for line in text.splitlines():
        if "details = " in line:  # a gRPC error: its status details say what happened
            return line.strip()[:limit]
    return (text.splitlines() or [type(error).__name__])[0][:limit]


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _condition(error: BaseException) -> str | None:
    get = getattr(error, "getCondition", None)
    try:
        return str(get()) if callable(get) and get() else None
    except Exception:
        return None


def _status(error: BaseException) -> str | None:
    """The gRPC status of a Spark Connect or gRPC error, by name."""
    for name in ("getGrpcStatusCode", "code"):
        get = getattr(error, name, None)
        if callable(get):
            try:
                code = get()
            except Exception:
                continue
            return getattr(code, "name", None) if code is not None else None
    return None
