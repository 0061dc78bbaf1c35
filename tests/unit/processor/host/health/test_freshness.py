"""Events' age at delivery: counted a batch at a time into the same buckets a Prometheus
histogram would give, backfills left out, and percentiles for /status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from observers import ArrowBatch, Origin
from processor.host.health.freshness import AGE_BUCKETS, EventAges, HintRecorder, feed_ages
from processor.host.health.host_progress import HostProgress
from tests.helpers import metric

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _scrape(collector: object) -> str:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


@given(st.lists(st.floats(min_value=0, max_value=200_000), max_size=60))
def test_the_buckets_are_those_of_a_prometheus_histogram(ages: list[float]) -> None:
    ours = EventAges()
    ours.observe("feed", np.array(ages))
    registry = CollectorRegistry()
    theirs = Histogram(
        "cfp_event_age_seconds", "x", ["source"], buckets=AGE_BUCKETS, registry=registry
    )
    for age in ages:
        theirs.labels("feed").observe(age)
    theirs.labels("hint")
    mine, reference = _scrape(ours), generate_latest(registry).decode()
    for bound in (*AGE_BUCKETS, "+Inf"):
        le = bound if bound == "+Inf" else f"{float(bound)}"
        for source in ("feed", "hint"):
            name = "cfp_event_age_seconds_bucket"
            assert metric(mine, name, source=source, le=le) == metric(
                reference, name, source=source, le=le
            )
    assert metric(mine, "cfp_event_age_seconds_sum", source="feed") == pytest.approx(sum(ages))


def test_status_gives_percentiles_of_the_recent_ages() -> None:
    ages = EventAges()
    assert ages.recent("hint") is None
    ages.observe("hint", np.arange(1, 101, dtype=np.float64))
    recent = ages.recent("hint")
    assert recent == {"events": 100, "p50": 50.5, "p95": 95.05, "p99": 99.01}
    assert orjson.loads(orjson.dumps(recent)) == recent  # plain floats: /status is JSON
    assert ages.percentiles() == {"hint p50": 50.5, "hint p99": 99.01}  # the host row's


def test_a_feed_batch_is_aged_by_its_event_times_and_a_backfill_not_at_all() -> None:
    def at(seconds: float) -> str:
        return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    records = [
        {"eventType": "BlobCreated", "eventTime": at(90)[:-1] + ".0000000Z"},  # as Azure writes
        {"eventType": "BlobBackfill", "eventTime": at(86400)},
        {"eventType": "BlobDeleted", "eventTime": at(2.5)},
    ]
    batch = ArrowBatch.from_records(
        records, ["1", "2", "3"], Origin("00", "idx/segments/2026/12/07/1100/meta.json")
    )
    assert sorted(feed_ages(batch, NOW).tolist()) == [2.5, 90.0]
    scan = ArrowBatch.from_records(
        records[1:2], ["1"], Origin("p0", "scan/2026-12-07T00:00:00+00:00")
    )
    assert len(feed_ages(scan, NOW)) == 0


def test_the_host_exports_both_sources_and_the_hints_counts() -> None:
    progress = HostProgress()
    hints: HintRecorder = progress.hints
    hints.received(3)
    hints.hints_delivered([NOW - timedelta(seconds=1.2)], NOW)
    text = generate_latest(progress.registry).decode()
    assert metric(text, "cfp_event_age_seconds_count", source="hint") == 1
    assert metric(text, "cfp_event_age_seconds_bucket", source="hint", le="2.0") == 1
    assert metric(text, "cfp_event_age_seconds_bucket", source="hint", le="1.0") == 0
    assert metric(text, "cfp_event_age_seconds_count", source="feed") == 0
    assert metric(text, "cfp_hint_messages_total") == 3
    assert hints.last_hint_at == NOW
