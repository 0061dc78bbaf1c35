"""`cfp spark-connect` servers that tests (and the chaos runner) start, kill and start again on
the same port: the process a user runs, its JVM found among its children."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from processor.emulator.azurite import ROOT, free_port, wait_for_port
from tests import patience
from tests.jvms import jvm_pids, lasting_jvm


class ConnectServer:
    """One `cfp spark-connect` on a loopback port, its log in `logs` (appended across starts)."""

    def __init__(
        self,
        logs: Path,
        *,
        port: int | None = None,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        lasting: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.logs = logs
        self.port = port or free_port()
        self.master = master
        self.conf = dict(conf or {})
        self.lasting = lasting  # it serves a whole file of tests: its JVM keeps C2
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True) -> None:
        """Start it (`wait`: until it listens, as long as the test may wait)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        more = [a for k, v in self.conf.items() for a in ("--spark-conf", f"{k}={v}")]
        with lasting_jvm() if self.lasting else contextlib.nullcontext():
            self.process = subprocess.Popen(
                [sys.executable, "-m", "processor", "spark-connect", "--port", str(self.port),
                 "--spark-master", self.master, "--log-dir", str(self.logs), *more],
                cwd=ROOT, stdout=(self.logs / "out.log").open("ab"), stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )  # fmt: skip
        self.starts += 1
        if wait:
            self.wait_listening()

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_listening(self) -> None:
        wait_for_port(self.port, timeout_s=patience.left_s(), process=self.process)

    def jvm(self) -> int | None:
        """The pid of the server's JVM (None: none runs)."""
        found = jvm_pids(f"spark.connect.grpc.binding.port={self.port}")
        return found[0] if found else None

    def kill(self) -> int | None:
        """SIGKILL `cfp spark-connect` itself, as an OOM killer or a lost node would; its JVM
        must follow (`spark_connect_command.die_with`). The JVM's pid it had."""
        jvm = self.jvm()
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=patience.left_s())
        return jvm

    def wait_gone(self, jvm: int | None) -> None:
        """Until the JVM `jvm` has exited, as long as the test may wait."""
        deadline = patience.deadline()
        while jvm is not None and _alive(jvm):
            assert time.monotonic() < deadline, f"the server's JVM (pid {jvm}) outlived it"
            time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM, as a user's Ctrl-C or an orchestrator's stop: its exit status."""
        if self.process is None or self.process.poll() is not None:
            return 0 if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=patience.left_s())

    def out(self) -> str:
        """What the command printed, for a failed assertion's message."""
        path = self.logs / "out.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie does not: it only waits for its exit to be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"
