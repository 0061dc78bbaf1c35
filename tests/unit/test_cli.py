"""Command-line parsing that needs no storage."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from processor.cli.main import ByteSize, IsoTime, main


@pytest.mark.parametrize(
    ("text", "value"), [("4MiB", 4 << 20), ("512k", 512 << 10), ("65536", 65536)]
)
def test_byte_sizes(text: str, value: int) -> None:
    assert ByteSize().convert(text, None, None) == value


def test_bad_byte_size_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["read", "--read-size", "lots"])
    assert result.exit_code == 2 and "lots" in result.output


def test_times_default_to_utc() -> None:
    assert IsoTime().convert("2026-01-01T10:00:00", None, None) == datetime(
        2026, 1, 1, 10, tzinfo=UTC
    )
    assert IsoTime().convert("2026-01-01T12:00:00+02:00", None, None) == datetime(
        2026, 1, 1, 10, tzinfo=UTC
    )


def test_bad_emulator_settings_are_usage_errors() -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["emulate", "--block-events", "9-3"])
    assert bad.exit_code == 2 and "block-events" in bad.output
    bad = runner.invoke(main, ["emulate", "--shards", "0,2"])
    assert bad.exit_code == 2 and "shards" in bad.output


def test_help_lists_the_commands() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    assert "read" in out and "emulate" in out


def test_a_sigterm_while_the_command_is_still_importing_exits_0() -> None:
    """An orchestrator may stop a container right after starting it: no -15, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", "run", "--help"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.3)  # the interpreter is up, the CLI's imports are still running
    assert proc.poll() is None, "the command finished before the signal could be sent"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err


def test_a_keyless_connection_string_means_entra_id() -> None:
    from azure.identity.aio import DefaultAzureCredential

    from processor import connection

    info = connection.parse("AccountName=acct")
    assert not info.has_secret
    assert info.blob_endpoint == "https://acct.blob.core.windows.net"
    assert info.table_endpoint == "https://acct.table.core.windows.net"
    keyless = "BlobEndpoint=https://acct.blob.core.windows.net/"
    assert connection.parse(keyless).table_endpoint == "https://acct.table.core.windows.net"
    service = connection.blob_service(keyless)
    table = connection.table_client(keyless, "cfpleases")
    assert isinstance(service.credential, DefaultAzureCredential)
    assert table.credential is service.credential  # one credential per process
    assert service.url.startswith("https://acct.blob.core.windows.net")
    assert table.url.startswith("https://acct.table.core.windows.net")
    keyed = connection.azurite_connection_string()
    assert connection.parse(keyed).has_secret
    assert not isinstance(connection.blob_service(keyed).credential, DefaultAzureCredential)
