"""Shared fixtures: a real Azurite per test session (per worker under `make test`), a clean
account per test, and one embedded Spark session with Delta Lake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob.aio import BlobServiceClient
from hypothesis import settings

from processor.emulator.azurite import Azurite
from processor.emulator.service import reset_account
from tests import patience
from tests.cluster import LIVE
from tests.helpers import EMULATOR_CONTAINERS
from tests.jvms import lasting_jvm, quick_jvms

# No per-example time limit: hypothesis's default (200 ms) is a wall-clock assertion, which a
# busy machine fails (a first example that loads pyarrow took 330 ms); the suite's own timeout
# still catches a property that hangs.
settings.register_profile("cfp", deadline=None)
settings.load_profile("cfp")


def pytest_configure(config: pytest.Config) -> None:
    quick_jvms()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Every wait of the test lasts until shortly before its timeout (`tests/patience.py`);
    returns nothing, so that pytest-timeout then sets its own timer."""
    patience.begin(settings.timeout)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    patience.begin(None)


# `make test` hands whole files to its workers in this order (`--no-loadscope-reorder`; by
# default pytest-xdist puts the files with most tests first): the two Spark files first, on two
# workers, so that they overlap each other and nothing else that starts a JVM, then the longest
# of the rest (measured worker-seconds, 2 cores; the Spark source's file after the hosts', when
# the first Spark file is done)
FIRST = (
    "test_spark.py",
    "test_delta_tables.py",
    "test_hosts.py",
    "test_spark_loss.py",
    "test_spark_source.py",
    "test_resume_property.py",
    "test_storage_faults.py",
    "test_stuck_leases.py",
    "test_endpoints.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within a file and among the others stays


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that ran hosts reports where each one still running waited (fixtures
    stop them after this), and the last log lines of each, running or exited."""
    report = yield
    if call.when == "call" and report.failed:
        for cluster in LIVE:
            if cluster.procs:
                report.sections.append((f"hosts of {cluster.processor}", cluster.diagnose()))
    if call.when == "teardown":
        LIVE.clear()
    return report


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    server = Azurite(Path(tmp_path_factory.mktemp("azurite"))).start()
    yield server
    server.stop()


@pytest.fixture
async def account(azurite: Azurite) -> AsyncIterator[str]:
    """A connection string to an account whose feed and emulator containers are empty."""
    conn = azurite.connection_string
    async with BlobServiceClient.from_connection_string(conn) as service:
        await reset_account(service, EMULATOR_CONTAINERS)
    yield conn


@pytest.fixture(scope="session")
def delta_spark() -> Iterator[Any]:
    """One embedded Spark session with Delta Lake for the tests that need a real one (its JVM
    starts once per test run)."""
    from observers.builtin.spark.session.output import parse_output
    from observers.builtin.spark.session.session import SparkOptions, open_session

    with lasting_jvm():
        spark = open_session(SparkOptions(parse_output("/nowhere"), master="local[2]"))
    yield spark
    spark.stop()
