"""How fresh the data a host delivers is: the age of each event when its observer accepted it
(its `eventTime` against the host's wall clock), split by where it came from, the feed or a hint;
and what became of the hints queue's messages.

Ages are counted per batch with numpy into the histogram's buckets (`cfp_event_age_seconds`),
never one `observe` per event; the last `RECENT` ages of each source give `/status` its
percentiles."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from observers.envelope import BACKFILL_EVENT, SCAN_SEGMENT_PREFIX
from processor.hints.messages import PoisonReason

if TYPE_CHECKING:
    import pyarrow as pa

    from observers import ArrowBatch

SOURCES = ("feed", "hint")
AGE_BUCKETS = (0.5, 1, 2, 3, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
RECENT = 4096  # the ages per source `/status`'s percentiles are taken from


class EventAges(Collector):
    """`cfp_event_age_seconds{source}`, counted a batch at a time."""

    def __init__(self) -> None:
        self._bounds = np.array(AGE_BUCKETS, dtype=np.float64)
        self._counts = {s: np.zeros(len(AGE_BUCKETS) + 1, dtype=np.int64) for s in SOURCES}
        self._sums = dict.fromkeys(SOURCES, 0.0)
        self._recent: dict[str, deque[float]] = {s: deque(maxlen=RECENT) for s in SOURCES}

    def observe(self, source: str, ages_s: np.ndarray[Any, np.dtype[np.float64]]) -> None:
        if not len(ages_s):
            return
        ages_s = np.maximum(ages_s, 0.0)  # an event "from the future": the clocks disagree
        where = np.searchsorted(self._bounds, ages_s, side="left")
        self._counts[source] += np.bincount(where, minlength=len(AGE_BUCKETS) + 1)
        self._sums[source] += float(ages_s.sum())
        self._recent[source].extend(ages_s[-RECENT:].tolist())

    def recent(self, source: str) -> dict[str, float | int] | None:
        """`/status`'s view of a source: percentiles of its last ages (None: none yet)."""
        ages = self._recent[source]
        if not ages:
            return None
        p50, p95, p99 = (
            float(p) for p in np.percentile(np.fromiter(ages, np.float64), [50, 95, 99])
        )
        total = int(self._counts[source].sum())
        return {"events": total, "p50": round(p50, 3), "p95": round(p95, 3), "p99": round(p99, 3)}

    def percentiles(self) -> dict[str, float]:
        """What a host row says of its freshness: "SOURCE pNN" -> seconds, of the sources with
        ages (the row is small; `/status` has the rest)."""
        return {
            f"{source} {p}": float(recent[p])
            for source in SOURCES
            if (recent := self.recent(source)) is not None
            for p in ("p50", "p99")
        }

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "cfp_event_age_seconds",
            "Age of each event when its observer accepted it (its eventTime against this "
            "host's clock), by source: feed (the change feed; the initial scan's backfill is "
            "left out) or hint (Blob Storage events from --hints-queue).",
            labels=["source"],
        )
        for source in SOURCES:
            cumulative = np.cumsum(self._counts[source])
            buckets = [(_bound(b), float(c)) for b, c in zip(AGE_BUCKETS, cumulative, strict=False)]
            buckets.append(("+Inf", float(cumulative[-1])))
            family.add_metric([source], buckets, self._sums[source])
        yield family


def _bound(value: float) -> str:
    return f"{float(value)}"


def feed_ages(batch: ArrowBatch, now: datetime) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The age of each event of a feed batch at `now`; the backfill's (a blob's last change, not
    an event) and any without a readable time are left out."""
    import pyarrow.compute as pc  # noqa: PLC0415 - loaded with the first batch

    if batch.origin.segment_path.startswith(SCAN_SEGMENT_PREFIX) or not len(batch):
        return np.empty(0)
    records = batch.records
    if "eventTime" not in records.column_names:
        return np.empty(0)
    times = records.column("eventTime")
    if "eventType" in records.column_names:
        kinds = records.column("eventType")
        if _is_dictionary(kinds):  # an Avro enum, as decoded
            kinds = kinds.cast("string")
        times = times.filter(pc.not_equal(kinds, _text(BACKFILL_EVENT)))
    return ages_of(times, now)


def _text(value: str) -> pa.Scalar:
    """A typed scalar: pyarrow imports pandas (1-2 s) to infer the type of an untyped one."""
    import pyarrow as pa  # noqa: PLC0415

    return pa.scalar(value, pa.string())


def _is_dictionary(column: pa.ChunkedArray | pa.Array) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    return bool(pa.types.is_dictionary(column.type))


def ages_of(
    times: pa.ChunkedArray | pa.Array, now: datetime
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Seconds from each ISO 8601 time in `times` to `now` (unreadable ones left out)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    try:  # through nanoseconds: the service writes seven fractional digits
        stamps = pc.cast(
            pc.cast(times, pa.timestamp("ns", tz="UTC")), pa.timestamp("us", tz="UTC"), safe=False
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.empty(0)
    micros = pc.drop_null(stamps.cast(pa.int64()))
    if isinstance(micros, pa.ChunkedArray):
        micros = micros.combine_chunks()
    # from the buffer itself: pyarrow's to_numpy imports pandas (1-2 s), which a host never needs
    values = np.frombuffer(
        micros.buffers()[1], dtype=np.int64, count=len(micros), offset=micros.offset * 8
    )
    now_us = int(now.astimezone(UTC).timestamp() * 1_000_000)
    return np.asarray((now_us - values) / 1e6, dtype=np.float64)


class HintRecorder:
    """What the hints queue's reader reports (`processor.hints.queue_reader.HintCounts`)."""

    def __init__(self, registry: CollectorRegistry, ages: EventAges) -> None:
        r = registry
        self._ages = ages
        self.messages = Counter(
            "cfp_hint_messages", "Messages this host received from the hints queue.", registry=r
        )
        self.hints = Counter(
            "cfp_hints", "Hints this host's observer accepted (their messages deleted).", registry=r
        )
        self.refused = Counter(
            "cfp_hints_not_accepted",
            "Hints the observer did not accept (their messages come back after the visibility "
            "timeout).",
            registry=r,
        )
        self.ignored_events = Counter(
            "cfp_hint_messages_ignored",
            "Blob Storage events of types the change feed never records (renames, directories, "
            "policy runs): deleted, not delivered.",
            registry=r,
        )
        self.poison = Counter(
            "cfp_hint_messages_poison",
            "Messages moved to <queue>-poison, by reason.",
            ["reason"],
            registry=r,
        )
        for reason in PoisonReason:
            self.poison.labels(reason.value)
        self.reading = Gauge(
            "cfp_hints_reading",
            "1 while this host reads a hints queue (--hints-queue), else 0.",
            registry=r,
        )
        self.last_hint_at: datetime | None = None

    def reads(self, on: bool) -> None:
        self.reading.set(1 if on else 0)

    def received(self, messages: int) -> None:
        self.messages.inc(messages)

    def ignored(self) -> None:
        self.ignored_events.inc()

    def poisoned(self, reason: PoisonReason) -> None:
        self.poison.labels(reason.value).inc()

    def not_accepted(self, hints: int) -> None:
        self.refused.inc(hints)

    def hints_delivered(self, event_times: Sequence[datetime], at: datetime) -> None:
        self.hints.inc(len(event_times))
        self.last_hint_at = at
        self._ages.observe(
            "hint", np.array([(at - t).total_seconds() for t in event_times], dtype=np.float64)
        )
