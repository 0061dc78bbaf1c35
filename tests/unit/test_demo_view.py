"""`make demo`'s view (deploy/local/demo_view.py): a host's lease count is the lease table's (a
killed host keeps its last report in its row), a running host's note says why it holds nothing,
and a log file gets a snapshot now and then, without the demo's notes (printed once elsewhere)."""

from __future__ import annotations

import importlib.util
import io
import sys
from datetime import UTC, datetime, timedelta
from types import ModuleType

from rich.console import Console

from leases import HostId, HostReport, Lease, LeaseToken
from tests.deploy_files import DEPLOY


def _demo_view() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_view", DEPLOY / "local" / "demo_view.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("demo_view", module)
    spec.loader.exec_module(module)
    return module


view = _demo_view()


def _host(name: str, *, leases: int, silent_s: float = 0.0, note: str = "") -> HostReport:
    seen = datetime.now(UTC) - timedelta(seconds=silent_s)
    return HostReport(HostId(name), "running", seen, seen, leases, expiry_s=6.0, note=note)


def _text(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return out.getvalue()


def _row(text: str, host: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"│ {host} "))
    return [c.strip() for c in line.strip("│").split("│")]


def test_hosts_show_the_leases_the_table_says_they_own_and_why_one_holds_none() -> None:
    leases = [
        Lease(LeaseToken("00"), owner=HostId("h1")),
        Lease(LeaseToken("01"), owner=HostId("h1")),
        Lease(LeaseToken("02"), owner=None),  # the killed host's, not yet taken
    ]
    hosts = [
        _host("h1", leases=2),
        _host("h2", leases=3, silent_s=30),  # killed with kill -9: its row still says 3
        _host("h3", leases=0, note="opening its observer (spark) first"),
    ]
    snap = view.Snapshot(at=0.0, leases=leases, hosts=hosts, status={})
    text = _text(view.render(snap, view.Rates(), headline="t", notes=["[ 1.0s] a note"]))
    assert _row(text, "h1")[1:3] == ["running", "2"]
    assert _row(text, "h2")[1:3] == ["silent 30s (said running)", "0"]
    assert _row(text, "h3")[1:3] == ["running (opening its observer (spark) first)", "0"]
    assert "a note" in text


def test_a_log_file_gets_a_snapshot_now_and_then_and_no_notes_under_it() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)  # not a terminal
    with view.View(console, every_s=3600) as v:
        assert v.notes_to_draw(["[ 1.0s] h1 started"]) == []
        snap = view.Snapshot(at=0.0, leases=[], hosts=[_host("h1", leases=0)], status={})
        for n in range(3):
            v.show(view.render(snap, view.Rates(), headline=f"frame {n}", notes=[]))
        v.show(view.render(snap, view.Rates(), headline="last", notes=[]), force=True)
    printed = out.getvalue()
    assert "frame 0" in printed and "last" in printed
    assert "frame 1" not in printed and "frame 2" not in printed


def test_the_rate_spans_commits_and_the_headline_tells_repeats_from_distinct_events() -> None:
    """A Spark host's count moves once a commit, seconds apart: the rate is taken over the
    window, not between two snapshots; repeated deliveries (after a kill) are told apart from
    the distinct events the change log holds."""
    rates = view.Rates(window_s=30.0)
    hosts = [_host("h1", leases=1)]
    for at, events in ((0.0, 0), (5.0, 0), (10.0, 600), (15.0, 600), (20.0, 1200)):
        rates.update(view.Snapshot(at, [], hosts, {"h1": {"events": events}}))
    assert rates.rates["h1"] == 60.0  # 1,200 events in 20 s, though the last 5 s saw none new
    leases = [Lease(LeaseToken("00"), owner=HostId("h1"))]
    status = {"h1": {"events": 1200, "leases": [{"lease": "00", "events": 1200}]}}
    snap = view.Snapshot(20.0, leases, hosts, status)
    text = _text(view.render(snap, rates, headline="t", notes=[], distinct=1000))
    assert "deliveries 1,200 (60/s), change log 1,000 distinct events so far" in text
    final = _text(view.render(snap, rates, headline="t", notes=[], distinct=1000, final=True))
    assert "change log 1,000 distinct events (200 deliveries were repeats)" in final
    assert "reading, 1,200 delivered, no checkpoint yet" in text
