"""Which Spark Connect servers a host writes through, in which order (pure).

`--spark-remote sc://a:15002,sc://b:15002` names several servers. Each is a Spark application of
its own, any of which can carry any lease's next write: the fences and floors live in Delta, not
in a server. A host uses the first of its order that answers and, when that server is lost,
tries the ones after it before coming back to it. Orders differ by host name (a stable hash picks
where a host starts in the list), so that a fleet spreads over the servers instead of piling onto
the first one, and a host that restarts goes back where it was.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from observers.errors import PluginLoadError

SCHEME = "sc://"


def parse_remotes(spec: str | None) -> tuple[str, ...]:
    """The servers of `--spark-remote` (comma-separated), each `sc://HOST:PORT` with optional
    `/;key=value` parameters; () when none is given (an embedded session).

    Errors: `PluginLoadError` naming the entry that is not a Spark Connect URL, or a server
    named twice."""
    if spec is None or not spec.strip():
        return ()
    remotes = tuple(part.strip() for part in spec.split(","))
    for remote in remotes:
        _check(remote)
    if len(set(remotes)) < len(remotes):
        raise PluginLoadError("spark", f"--spark-remote {spec!r}: a server is named twice")
    return remotes


def _check(remote: str) -> None:
    if not remote.startswith(SCHEME):
        raise PluginLoadError(
            "spark", f"--spark-remote: {remote!r} is not a Spark Connect URL (sc://HOST:PORT)"
        )
    try:
        address = urlsplit(remote)
        port = address.port  # raises on a port that is not a number in range
    except ValueError as e:
        raise PluginLoadError("spark", f"--spark-remote: {remote!r}: {e}") from None
    if not address.hostname:
        raise PluginLoadError("spark", f"--spark-remote: {remote!r} names no host")
    del port


def host_order(remotes: tuple[str, ...], host: str) -> tuple[str, ...]:
    """The servers in the order `host` tries them: the list rotated to start at a place picked
    by a stable hash of the host's name (the same on every machine and in every run)."""
    if not remotes:
        return ()
    digest = hashlib.sha256(host.encode()).digest()
    start = int.from_bytes(digest[:8], "big") % len(remotes)
    return remotes[start:] + remotes[:start]


def after_loss(order: tuple[str, ...], lost: str | None) -> tuple[str, ...]:
    """The servers to try once `lost` no longer answers: those after it in the host's order,
    then those before it, then `lost` itself (a restart of it may be all there is). Not in the
    order (None: nothing was lost), the order as it is."""
    if lost not in order:
        return order
    i = order.index(lost)
    return order[i + 1 :] + order[:i] + (lost,)


def describe(remotes: tuple[str, ...]) -> str:
    return ", ".join(remotes)
