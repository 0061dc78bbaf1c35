"""deploy/ agrees with the code: the files parse, every CFP_* variable and flag they use exists,
probes and ports match what `cfp run` serves, and every metric a dashboard or autoscaler queries
is one the hosts export. (No Docker engine or cluster runs here: this is what can be checked.)"""

from __future__ import annotations

import json
import re

import pytest

from observers.builtin.spark.session.jars import JARS_DIR_VAR
from processor.host.health import probe
from processor.host.health.endpoints import HostHealth, make_app
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import Lifecycle
from processor.host.host_config import DEFAULT_HTTP_PORT
from tests.deploy_files import DEPLOY, check_cfp_args, cli_variables, compose, dockerfile, k8s

RUN_VARIABLES = cli_variables("run")


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "stateset": ("",)}


def exported_metrics() -> set[str]:
    """Every series name the hosts may export (a labelled counter has no sample until used)."""
    names: set[str] = set()
    for family in HostProgress().registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def routes() -> set[str]:
    health = HostHealth("h", "p", Lifecycle(clock=lambda: 0.0), HostProgress(), 30, 120)
    return {r.resource.canonical for r in make_app(health).router.routes() if r.resource}


def cfp_keys(mapping: dict[str, object]) -> set[str]:
    return {k for k in mapping if k.startswith("CFP_")}


@pytest.mark.parametrize("target", ["host", "spark"])
def test_both_images_run_cfp_run_configured_only_by_known_variables(target: str) -> None:
    d = dockerfile(target)
    assert d.entrypoint + d.cmd == ["cfp", "run"]
    check_cfp_args(d.entrypoint + d.cmd)
    # the spark image keeps the Delta jars, and says where; the host has none
    known = RUN_VARIABLES | ({JARS_DIR_VAR} if target == "spark" else set())
    assert cfp_keys(d.env) <= known, cfp_keys(d.env) - known
    assert d.env["CFP_HTTP_HOST"] == "0.0.0.0" and int(d.env["CFP_HTTP_PORT"]) == DEFAULT_HTTP_PORT
    assert d.healthcheck[:3] == ["python", "-m", "processor.host.health.probe"]
    assert d.healthcheck[3] in routes()
    assert probe.DEFAULT_HTTP_PORT == DEFAULT_HTTP_PORT


def test_the_images_install_their_roles_locks() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "deploy/spark/pom.xml" in text  # the jars' stage
    assert "COPY deploy/requirements-connect.lock" in text.split("AS host-venv")[1]
    assert "COPY deploy/requirements-spark.lock" in text.split("AS spark-venv")[1]
    for source in dockerfile().copies:
        assert (DEPLOY.parent / source).exists(), source


def test_the_build_context_keeps_what_the_dockerfile_copies_and_little_else() -> None:
    """.dockerignore excludes everything but the Dockerfile's sources (.venv, node_modules and
    .bench would be gigabytes of context)."""
    lines = (DEPLOY.parent / ".dockerignore").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*"
    kept = {rule.removeprefix("!") for rule in rules if rule.startswith("!")}
    assert set(dockerfile().copies) == kept


def test_compose_services_use_real_flags_and_variables() -> None:
    services = compose()["services"]
    servers = ("spark-connect", "spark-connect-b")
    assert {"azurite", "workload", *servers, "hosts"} <= set(services)
    for name in ("workload", *servers):
        s = services[name]
        check_cfp_args(s["entrypoint"] + s["command"])
    assert services["workload"]["network_mode"] == "service:azurite"  # the emulator: loopback only
    hosts = services["hosts"]
    env = hosts["environment"]
    assert cfp_keys(env) <= RUN_VARIABLES, cfp_keys(env) - RUN_VARIABLES
    assert hosts["deploy"]["replicas"] >= 2
    ports = [
        services[name]["command"][services[name]["command"].index("--port") + 1] for name in servers
    ]
    assert env["CFP_SPARK_REMOTE"] == ",".join(f"sc://azurite:{port}" for port in ports)
    for name, port in zip(servers, ports, strict=True):  # each checked where it listens
        assert f"'127.0.0.1', {port}" in services[name]["healthcheck"]["test"][-1]
        assert name in hosts["depends_on"]
    grace = int(hosts["stop_grace_period"].rstrip("s"))
    assert grace > float(env["CFP_LEASE_EXPIRATION"])
    assert f"{env['CFP_HTTP_PORT']}" in hosts["expose"]


def test_kubernetes_manifests_match_the_cli_and_the_endpoints() -> None:
    docs = k8s()
    kustomization = docs["Kustomization"]
    for resource in kustomization["resources"]:
        assert (DEPLOY / "k8s" / resource).exists(), resource
    config = docs["ConfigMap"]["data"]
    secret = docs["Secret"]["stringData"]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    used = cfp_keys(config) | cfp_keys(secret) | {e["name"] for e in container["env"]}
    assert used <= RUN_VARIABLES, used - RUN_VARIABLES
    check_cfp_args(["cfp", *container["args"]])
    port = int(config["CFP_HTTP_PORT"])
    assert container["ports"][0]["containerPort"] == port
    annotations = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == port
    assert annotations["prometheus.io/path"] in routes()
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] in routes()
    # a drain must fit in the grace period: at least a lease expiry, with room for the batch
    assert pod["terminationGracePeriodSeconds"] > 2 * float(config["CFP_LEASE_EXPIRATION"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    scaled = docs["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    assert scaled["minReplicaCount"] >= 1


def test_dashboards_and_autoscaling_query_exported_metrics() -> None:
    exported = exported_metrics()
    queries = [
        t["expr"]
        for panel in json.loads((DEPLOY / "grafana" / "cfp-dashboard.json").read_text())["panels"]
        for t in panel["targets"]
    ]
    queries += [t["metadata"]["query"] for t in k8s()["ScaledObject"]["spec"]["triggers"]]
    named = {m for q in queries for m in re.findall(r"\bcfp_[a-z_]+", q)}
    assert named, "no metric found in the queries"
    assert named <= exported, named - exported
