"""Keeping secrets out of logs, error messages and `/status`.

Two nets, both applied to every log event and every error `cfp` prints:

- patterns: whatever looks like a connection-string key (`AccountKey=`, `SharedAccessSignature=`)
  or a SAS query parameter (`sig=`, and the signed fields around it) is cut out, whoever wrote
  it (our code, the Azure SDK, aiohttp);
- known values: the keys and signatures of the connection strings this process was given are
  registered at start, and any occurrence of them is replaced, however it is quoted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any

MASK = "***"

_PATTERNS = (
    # connection-string fields that are secrets, up to the next `;` or quote or space
    re.compile(r"(?i)\b(AccountKey|SharedAccessSignature|SharedAccessKey)=([^;\s'\"]+)"),
    # SAS query parameters (a URL with a SAS token in an error message)
    re.compile(
        r"(?i)([?&](?:sig|se|sp|sv|st|spr|srt|ss|sr|skoid|sktid|skt|ske|sks|skv)=)([^&\s'\"]+)"
    ),
    # an Authorization header an SDK error may echo
    re.compile(r"(?i)\b(Authorization['\"]?\s*[:=]\s*['\"]?)(SharedKey|Bearer)?\s*([^\s,'\"}]+)"),
)

_known: set[str] = set()
_lock = threading.Lock()


def register_connection_string(conn_str: str | None) -> None:
    """Remember the secret parts of a connection string so that they are masked everywhere."""
    if not conn_str:
        return
    for item in conn_str.split(";"):
        key, sep, value = item.partition("=")
        if sep and key.strip().lower() in {"accountkey", "sharedaccesssignature"} and value:
            register_secret(value.strip())


def register_secret(value: str) -> None:
    if len(value) >= 8:  # a short value would mask ordinary words
        with _lock:
            _known.add(value)
            _known.add(value.lstrip("?"))


def redact(text: str) -> str:
    """`text` with every secret masked."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _PATTERNS[0].sub(lambda m: f"{m.group(1)}={MASK}", text)
    text = _PATTERNS[1].sub(lambda m: f"{m.group(1)}{MASK}", text)
    return _PATTERNS[2].sub(lambda m: f"{m.group(1)}{MASK}", text)


def redact_value(value: Any) -> Any:
    """Strings redacted; lists, tuples and dicts walked; other values returned as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    if isinstance(value, Mapping):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def redact_event(_logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
    """A structlog processor: runs last before rendering, over every field (tracebacks too)."""
    for key, value in list(event.items()):
        event[key] = redact_value(value)
    return event
