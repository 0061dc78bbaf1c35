"""deploy/prometheus agrees with itself and with the code: promtool loads the alert rules and
their unit tests pass, those tests catch a broken rule, and every metric the rules query is one
the hosts export."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from processor.host.health.host_progress import HostProgress
from tests import patience
from tests.deploy_files import DEPLOY

RULES_DIR = DEPLOY / "prometheus"
RULES = RULES_DIR / "alerts.yaml"
RULE_TESTS = RULES_DIR / "alerts_test.yaml"
PROMTOOL = RULES_DIR / ".promtool" / "promtool"

# the series a family of each type puts in the exposition (a gauge's or a state set's: its name)
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "info": ("_info",),
}
# a metric name, unless it is a label name in a matcher (`cfp_host_state=~"failed"`)
METRIC = re.compile(r"\bcfp_[a-z0-9_]+\b(?!\s*(?:=~|!~|!=|=)\s*\")")

Rules = dict[str, Any]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the pinned promtool; a missing one fails the test (it is part of `make install`)."""
    if not os.access(PROMTOOL, os.X_OK):
        pytest.fail(
            f"promtool not found at {PROMTOOL.relative_to(DEPLOY.parent)}: run `make install`"
            " (it extracts promtool from Debian's prometheus package)",
            pytrace=False,
        )
    return subprocess.run(
        [str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=patience.left_s()
    )


def load_rules() -> Rules:
    return dict(yaml.safe_load(RULES.read_text()))


def alerts(rules: Rules) -> list[dict[str, Any]]:
    """Every alerting rule of the file, over its groups."""
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def alert(rules: Rules, name: str) -> dict[str, Any]:
    return next(r for r in alerts(rules) if r["alert"] == name)


def exported_metrics() -> set[str]:
    """Every series name a host may export: families are collected even with no samples yet (a
    labelled counter before its first use, per-lease gauges while no lease is held)."""
    return {
        family.name + suffix
        for family in HostProgress().registry.collect()
        for suffix in SERIES_SUFFIXES.get(family.type, ("",))
    }


def test_promtool_checks_the_rules_and_their_tests_pass() -> None:
    check = promtool("check", "rules", RULES.name, cwd=RULES_DIR)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=RULES_DIR)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_complete_and_tested_both_ways() -> None:
    """A `for`, a severity, a summary and a description on every alert; for each one, the unit
    tests expect it firing at some time and quiet at another."""
    rules = alerts(load_rules())
    assert rules
    for rule in rules:
        assert "for" in rule, rule["alert"]
        assert rule["labels"]["severity"] in {"page", "warning"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    for name in (r["alert"] for r in rules):
        expected = [case["exp_alerts"] for case in cases if case["alertname"] == name]
        assert any(expected), f"no test expects {name} to fire"
        assert not all(expected), f"no test expects {name} to stay quiet"


def never_fires(rules: Rules) -> None:
    alert(rules, "CfpLeaseStuck")["expr"] = "cfp_lease_stuck > 1"


def dropped(rules: Rules) -> None:
    for group in rules["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != "CfpDeadLetters"]


def lag_high_is_enough(rules: Rules) -> None:
    alert(rules, "CfpLagGrowing")["expr"] = "cfp_lag_seconds > 300"


def unowned_briefly_is_enough(rules: Rules) -> None:
    alert(rules, "CfpLeaseWithoutOwner")["for"] = "1m"


def any_host_sees_it(rules: Rules) -> None:
    alert(rules, "CfpLeaseWithoutOwner")["expr"] = "max(cfp_leases_unowned) > 0"


def one_stalled_host_is_enough(rules: Rules) -> None:
    alert(rules, "CfpProcessorNotWriting")["expr"] = (
        "max by (processor) (cfp_seconds_since_progress)"
        " > on (processor) max by (processor) (cfp_stuck_after_seconds)"
    )


def any_outage_is_enough(rules: Rules) -> None:
    alert(rules, "CfpObserverUnavailable")["for"] = "0m"


def any_job_without_hints_fires(rules: Rules) -> None:
    expr = alert(rules, "CfpHintsStopped")["expr"]
    alert(rules, "CfpHintsStopped")["expr"] = expr.split(" and on (job) max by")[0]


def copy_rules(tmp_path: Path, rules: Rules) -> None:
    (tmp_path / RULES.name).write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)


def test_the_copied_rules_pass_before_they_are_broken(tmp_path: Path) -> None:
    """The control for the next test: the rules written back by PyYAML still pass."""
    copy_rules(tmp_path, load_rules())
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize(
    ("name", "breaks"),
    [
        ("CfpLeaseStuck", never_fires),
        ("CfpDeadLetters", dropped),
        ("CfpLagGrowing", lag_high_is_enough),
        ("CfpLeaseWithoutOwner", unowned_briefly_is_enough),
        ("CfpLeaseWithoutOwner", any_host_sees_it),
        ("CfpProcessorNotWriting", one_stalled_host_is_enough),
        ("CfpObserverUnavailable", any_outage_is_enough),
        ("CfpHintsStopped", any_job_without_hints_fires),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_promtool_tests_fail_when_a_rule_is_broken(
    tmp_path: Path, name: str, breaks: Callable[[Rules], None]
) -> None:
    """A rule that never fires, is gone, or fires when it should not: `promtool test rules`
    fails, on that alert."""
    rules = load_rules()
    breaks(rules)
    copy_rules(tmp_path, rules)
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0, tested.stdout
    assert f"alertname: {name}," in tested.stdout + tested.stderr


def test_the_rules_query_only_exported_metrics() -> None:
    exported = exported_metrics()
    texts = [r["expr"] for r in alerts(load_rules())]
    texts += [a for r in alerts(load_rules()) for a in r["annotations"].values()]
    named = {m for text in texts for m in METRIC.findall(text)}
    assert "cfp_lease_stuck" in named and "cfp_host_state" in named
    assert named <= exported, sorted(named - exported)
