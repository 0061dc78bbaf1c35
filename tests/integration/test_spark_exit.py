"""A host's Spark JVM ends with the host, even when the output's account is unreachable then.

hadoop-azure 3.5 sends client metrics to the account from a JVM shutdown hook, with ABFS's
retries: after an outage, a JVM whose account was gone at exit outlived its Python parent by
many minutes (an orphaned JVM found after a CI run). The session settings turn that off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from processor.emulator.azurite import Azurite
from tests import patience
from tests.helpers import ROOT

OUTPUT = "abfs://cfp-tables@devstoreaccount1.dfs.core.windows.net/exit"
JVM_EXIT_LIMIT_S = 120  # without the setting, still alive after 150 s

# the product's own session (open_session), writing through ABFS; one write rides out an outage
CHILD = f"""
import sys
from azure.storage.blob import BlobServiceClient
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from processor.connection import storage_access

conn = sys.argv[1]
BlobServiceClient.from_connection_string(conn).create_container("cfp-tables")
out = parse_output("{OUTPUT}")
spark = open_session(SparkOptions(out, access=storage_access(conn), master="local[1]"))
spark.range(10).write.format("delta").save(out.changes)
print(spark.sparkContext._gateway.proc.pid, flush=True)
sys.stdin.readline()  # the account is down for a while: this write retries until it is back
spark.range(10).write.format("delta").mode("append").save(out.changes)
print("written", flush=True)
sys.stdin.readline()  # the account is down for good: exit
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_jvm_ends_with_its_host_when_the_account_is_gone_after_an_outage(
    tmp_path: Path,
) -> None:
    azurite = Azurite(tmp_path / "azurite").start()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, azurite.connection_string],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    jvm = 0
    try:
        jvm = int(child.stdout.readline())
        azurite.stop()
        child.stdin.write("\n")
        child.stdin.flush()
        # the outage ABFS retries through (its failure metrics are what kept the JVM alive)
        time.sleep(8)  # fixed on purpose: the outage's length is the scenario
        azurite.start()  # the same ports and data
        assert child.stdout.readline().strip() == "written"
        azurite.stop()
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=patience.left_s()) == 0
        # how long the JVM outlives its host is the property itself (without the fix: minutes)
        deadline = time.monotonic() + JVM_EXIT_LIMIT_S  # fixed on purpose: the property
        while alive(jvm) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(jvm), f"the JVM (pid {jvm}) outlived its host by {JVM_EXIT_LIMIT_S}s"
    finally:
        child.kill()
        if jvm and alive(jvm):
            os.kill(jvm, 9)
        azurite.stop()
