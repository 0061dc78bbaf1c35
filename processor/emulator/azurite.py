"""Starting and stopping a real Azurite (pinned in `deploy/local`) for tests, bench and demo.

The binary is `deploy/local/node_modules/.bin/azurite` of this checkout, or `$CFP_AZURITE_BIN`.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from processor.connection import azurite_connection_string

ROOT = Path(__file__).resolve().parents[2]
AZURITE_BIN = Path(
    os.environ.get(
        "CFP_AZURITE_BIN", ROOT / "deploy" / "local" / "node_modules" / ".bin" / "azurite"
    )
)
START_TIMEOUT_S = 120.0
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_MARGIN = 12_000  # ports below the ephemeral range to pick from (20768-32767 on Linux)


def free_port() -> int:
    """A loopback port nothing listens on, for a server started next (Azurite, a Spark Connect
    server, a host's endpoints). Taken from below the kernel's ephemeral range: the port a
    `bind(0)` hands out comes from the range outgoing connections take their source ports
    from, so on a busy machine a connection could take it before the server binds it (seen:
    "the port is in use" for a host started on one)."""
    low = _ephemeral_low()
    pick = random.SystemRandom()
    for _ in range(64):
        port = pick.randrange(max(1024, low - EPHEMERAL_MARGIN), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # below the range, everything taken: any port, as the kernel says
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default where unknown)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def wait_for_port(
    port: int, timeout_s: float = 30.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until something listens on loopback `port`; fails at once if `process` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the process for port {port} exited ({process.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s}s")


@dataclass
class Azurite:
    """One Azurite process on free loopback ports with its data in `location`."""

    location: Path
    blob_port: int = 0
    table_port: int = 0
    queue_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return azurite_connection_string(
            blob_port=self.blob_port, table_port=self.table_port, queue_port=self.queue_port
        )

    def start(self) -> Azurite:
        if not AZURITE_BIN.exists():
            raise RuntimeError(
                f"{AZURITE_BIN} is missing: run `make test` (or `npm ci --prefix deploy/local`)"
            )
        self.location.mkdir(parents=True, exist_ok=True)
        self.blob_port = self.blob_port or free_port()
        self.table_port = self.table_port or free_port()
        self.queue_port = self.queue_port or free_port()
        log = open(self.location / "azurite.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [
                str(AZURITE_BIN),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--location",
                str(self.location),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.blob_port),
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                str(self.queue_port),
                "--tableHost",
                "127.0.0.1",
                "--tablePort",
                str(self.table_port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "AZURITE_ACCOUNTS": ""},
        )
        # generous: Node starts slowly beside several JVMs on two cores, and a restart loads
        # the account's metadata first
        try:
            for port in (self.blob_port, self.table_port, self.queue_port):
                wait_for_port(port, START_TIMEOUT_S, self.process)
        except RuntimeError as e:
            raise RuntimeError(f"Azurite did not start: {e} (its log: {log.name})") from e
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
