"""Secrets never leave the process: keys, SAS signatures and registered values are masked."""

from __future__ import annotations

import io
import json

import structlog

from processor.connection import azurite_connection_string
from processor.logs import configure_logging
from processor.redact import MASK, redact, redact_value, register_connection_string

KEY = "c2VjcmV0LWtleS10aGF0LWlzLWxvbmctZW5vdWdoLXRvLWJlLXJlYWw="
CONN = (
    f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
    "EndpointSuffix=core.windows.net"
)


def test_connection_string_keys_are_masked_by_pattern() -> None:
    text = redact(f"could not connect with {CONN}")
    assert KEY not in text and f"AccountKey={MASK}" in text and "AccountName=acct" in text


def test_sas_query_parameters_are_masked() -> None:
    url = "https://acct.blob.core.windows.net/c/b?sv=2023-01-03&se=2026-12-01&sp=r&sig=abc%2Fdef%3D"
    out = redact(f"GET {url} failed")
    assert "abc%2Fdef" not in out and "sig=***" in out and "https://acct.blob" in out


def test_registered_secrets_are_masked_wherever_they_appear() -> None:
    register_connection_string(CONN)
    # not in key=value form: only the registered value can catch it
    assert KEY not in redact(f'{{"key": "{KEY}"}}')
    assert redact_value({"a": [KEY, 1], "b": ValueError(KEY)}) == {
        "a": [MASK, 1],
        "b": f"ValueError: {MASK}",
    }


def test_logs_never_carry_a_key() -> None:
    register_connection_string(azurite_connection_string())
    buf = io.StringIO()
    configure_logging(level="DEBUG", json_lines=True)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=buf))
    log = structlog.get_logger("t")
    log.info("connecting", conn=CONN, nested={"url": "https://x/?sig=SECRETSIG123"})
    try:
        raise RuntimeError(f"failed with {CONN}")
    except RuntimeError:
        log.exception("boom")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    text = buf.getvalue()
    assert KEY not in text and "SECRETSIG123" not in text
    assert lines[0]["conn"].count(MASK) == 1 and "Traceback" in lines[1]["exception"]
    structlog.reset_defaults()
