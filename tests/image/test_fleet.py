"""`make image-test`: the image run as a fleet of hosts, the way the product is deployed.

Azurite runs on this machine (the tests' fixture); each host is a container of the image on the
host network, run as the image's user, with a read-only root filesystem and a writable /tmp (as
deploy/k8s/deployment.yaml asks), delivering with the jsonl observer (paced, mounted as a user's
observer would be) into a mounted folder. Not part of `make test`: it needs the image
(`make image`) and a container engine.
"""

from __future__ import annotations

import asyncio
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from leases.store.table_lease_store import TableLeaseStore
from processor.emulator.azurite import Azurite
from tests.helpers import Feed, emulate_afresh, get_text, until
from tests.image.fleet import Fleet, engine

ROOT = Path(__file__).resolve().parents[2]
HOST_ARGS = (
    "--lease-expiration", "6",
    "--renew-interval", "2",
    "--acquire-interval", "1",
    "--poll-interval", "0.5",
    "--max-batch-events", "50",
)  # fmt: skip

pytestmark = pytest.mark.timeout(600)  # containers start slower than processes; a drain takes 120 s


def grace_period_s() -> int:
    """What the Kubernetes manifests give a pod to drain after SIGTERM."""
    docs = yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text(encoding="utf-8"))
    deployment = next(d for d in docs if d and d.get("kind") == "Deployment")
    return int(deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    records = await emulate_afresh(
        azurite.connection_string, seed=31, segments=4, events_per_segment=3000,
        shards=(4, 6, 5, 6), feed_only=True,  # the hosts never look at the blobs
    )  # fmt: skip
    ids = {str(r["id"]) for r in records}
    assert len(ids) >= 12_000
    return Feed(azurite.connection_string, ids)


@pytest.fixture
def fleet(request: pytest.FixtureRequest, feed: Feed, tmp_path: Path) -> Iterator[Fleet]:
    processor = request.node.name.removeprefix("test_")[:20].replace("_", "-")
    made = Fleet(feed.conn, processor, tmp_path / "out", args=HOST_ARGS)
    try:
        yield made
    finally:
        made.remove_all()


async def answers(port: int, path: str) -> bool:
    try:
        await asyncio.to_thread(get_text, f"http://127.0.0.1:{port}{path}")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    return True


async def delivered_by(fleet: Fleet, name: str) -> int:
    path = fleet.out / f"{name}.jsonl"
    return path.exists() and path.stat().st_size > 0 and len(fleet.delivered())


async def test_three_containers_one_killed_and_a_fourth_deliver_every_event(
    fleet: Fleet, feed: Feed
) -> None:
    fleet.env["CFP_TEST_BATCH_DELAY_S"] = "0.5"  # about 20 s a lease: h4 joins mid-run
    for n, name in enumerate(("h1", "h2", "h3")):
        fleet.start(name, 18081 + n, "--until-caught-up")
    for name, port in fleet.ports.items():  # the probes the manifests use, on each port
        await until(lambda p=port: answers(p, "/healthz"), f"{name} live")
        await until(lambda p=port: answers(p, "/readyz"), f"{name} ready")
    assert engine("exec", fleet.container("h1"), "id", "-u").strip() == "10001"

    before = await until(lambda: delivered_by(fleet, "h2"), "h2 delivering")
    fleet.kill("h2")  # SIGKILL, mid-run: it holds leases with work left
    assert before < len(feed.ids), "h2 was killed after the fleet had delivered everything"
    fleet.start("h4", 18084, "--until-caught-up")

    for name in ("h1", "h3", "h4"):
        assert fleet.wait(name) == 0, fleet.logs(name)[-3000:]
    assert fleet.wait("h2") == 137  # killed by SIGKILL
    delivered = fleet.delivered()
    assert set(delivered) == feed.ids, f"{len(feed.ids - set(delivered))} events not delivered"
    assert (fleet.out / "h4.jsonl").stat().st_size > 0, "the fourth host delivered nothing"


async def test_a_stopped_container_drains_within_the_grace_period(fleet: Fleet, feed: Feed) -> None:
    """`podman stop` (SIGTERM, then SIGKILL after the manifests' grace period): the host finishes
    the batches in hand, checkpoints them, releases its leases, and exits 0 by itself."""
    fleet.env["CFP_TEST_BATCH_DELAY_S"] = "1"
    fleet.start("h1", 18091)
    await until(lambda: delivered_by(fleet, "h1"), "h1 delivering")
    fleet.stop("h1", grace_period_s())
    assert fleet.wait("h1") == 0, fleet.logs("h1")[-3000:]  # not 137: SIGKILL
    events = [e.get("event") for e in fleet.log_events("h1")]
    assert "host.draining" in events and "host.stopped" in events, events[-20:]
    async with TableLeaseStore.from_connection_string(
        feed.conn, processor=fleet.processor
    ) as store:
        leases = await store.list_leases()
    assert leases and all(lease.owner is None for lease in leases), leases
