"""Pure decisions about what to read: which segments, and which events of them to deliver."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.storage.layout import SEGMENT_INTERVAL, is_init_segment, segment_time

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# The service documents a segment's hour as approximate to +/- 15 minutes; we widen by an hour.
TIME_SLACK = timedelta(hours=1)
CONTROL = "Control"


@dataclass(frozen=True, slots=True)
class TimeRange:
    """`[start, end)` on event time; either side may be open."""

    start: datetime | None = None
    end: datetime | None = None

    def segment_may_hold(self, begin: datetime) -> bool:
        """Whether a segment beginning at `begin` may hold events of this range.

        The segment's nominal span `[begin, begin + 1h)` is widened by one hour on each side.
        """
        if self.start is not None and begin + SEGMENT_INTERVAL + TIME_SLACK <= self.start:
            return False
        return not (self.end is not None and begin - TIME_SLACK >= self.end)

    def is_past(self, begin: datetime) -> bool:
        """Whether this segment and every later one lie entirely after the range."""
        return self.end is not None and begin - TIME_SLACK >= self.end


def consumable_segments(
    paths: Iterable[str],
    *,
    last_consumable: datetime | None,
    after: str | None,
    include_after: bool,
    window: TimeRange,
) -> list[str]:
    """Segment manifest paths to read, oldest first.

    Skips the 1601 initialisation segment, segments before `after` (and `after` itself unless
    `include_after`), segments that begin after `last_consumable` (all of them when it is None:
    a feed without `lastConsumable` has nothing consumable yet), and segments outside `window`.
    """
    chosen: list[str] = []
    for path in sorted(set(paths)):
        if is_init_segment(path):
            continue
        if after is not None and (path < after or (path == after and not include_after)):
            continue
        begin = segment_time(path)
        if last_consumable is None or begin > last_consumable:
            break
        if window.is_past(begin):
            break
        if window.segment_may_hold(begin):
            chosen.append(path)
    return chosen


def parse_event_time(value: str) -> datetime:
    """Parse `eventTime` (ISO 8601, up to 7 fractional digits, `Z`) as an aware UTC datetime."""
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        # older Pythons and odd writers: cut the fraction to microseconds and retry
        head, _, tail = value.partition(".")
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits) :]
        t = datetime.fromisoformat(f"{head}.{digits[:6].ljust(6, '0')}{zone or '+00:00'}")
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which decoded records to deliver: the user's filter, a time range, and whether Control
    records."""

    change: ChangeFilter = field(default_factory=ChangeFilter)
    window: TimeRange = TimeRange()
    include_control: bool = False

    @property
    def is_trivial(self) -> bool:
        return (
            self.change.is_empty
            and self.window.start is None
            and self.window.end is None
            and self.include_control
        )

    def rows(self, table: pa.Table) -> np.ndarray | None:
        """`mask` as a numpy mask (a boolean per row); None: every one. Without Arrow compute
        when Control records are all the filter drops (`cfp read`'s default)."""
        if self.is_trivial:
            return None
        if self.change.is_empty and self.window == TimeRange() and not self.include_control:
            return ~control_rows(table)
        from processor.changefeed.record_columns import as_numpy_mask  # noqa: PLC0415

        keep = self.mask(table)
        return None if keep is None else as_numpy_mask(keep)

    def mask(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Which records of a batch (rows of `table`) to deliver; None: every one. Arrow
        compute over the whole batch, before anything is made of a record. A record without a
        readable `eventTime` is outside any time range."""
        import pyarrow as pa  # noqa: PLC0415 - loaded with the first batch, not by `cfp --help`
        import pyarrow.compute as pc  # noqa: PLC0415

        if self.is_trivial:
            return None
        # every scalar typed: pyarrow imports pandas to infer the type of an untyped one
        no = pa.scalar(False, pa.bool_())
        control = pa.chunked_array([pa.array(control_rows(table), pa.bool_())])
        change = self.change.mask(table)  # Control records are not changes: never filtered
        if self.include_control:
            keep = pa.chunked_array([pa.repeat(pa.scalar(True, pa.bool_()), table.num_rows)])
            keep = keep if change is None else pc.or_(control, change)
        else:
            keep = pc.invert(control) if change is None else pc.and_(pc.invert(control), change)
        w = self.window
        if w.start is not None or w.end is not None:
            times = event_times(table)
            if w.start is not None:
                start = pa.scalar(w.start, times.type)
                keep = pc.and_(keep, pc.fill_null(pc.greater_equal(times, start), no))
            if w.end is not None:
                keep = pc.and_(keep, pc.fill_null(pc.less(times, pa.scalar(w.end, times.type)), no))
        return keep


def control_rows(table: pa.Table) -> np.ndarray:
    """Which rows are Control records (`eventType` is `Control`; False where it is missing or
    not text), in polars: no Arrow compute, whose kernels cost a process 0.4 s and 50 MiB when
    first called."""
    import numpy as np  # noqa: PLC0415 - loaded with the first batch, not by `cfp --help`
    import polars as pl  # noqa: PLC0415

    if "eventType" not in table.column_names:
        return np.zeros(table.num_rows, bool)
    # a table, not its column: polars reads a dictionary column of a table without Arrow compute
    frame = pl.from_arrow(table.select(["eventType"]))
    assert isinstance(frame, pl.DataFrame)
    kind = frame.to_series()
    if kind.dtype not in (pl.String, pl.Categorical, pl.Enum):
        return np.zeros(table.num_rows, bool)
    return (kind.cast(pl.String) == CONTROL).fill_null(False).to_numpy()


def event_times(table: pa.Table) -> pa.ChunkedArray:
    """`eventTime` as UTC timestamps (microseconds); null where it is missing or not ISO 8601."""
    import pyarrow as pa  # noqa: PLC0415 - loaded with the first batch, not by `cfp --help`
    import pyarrow.compute as pc  # noqa: PLC0415

    from processor.changefeed.record_columns import text  # noqa: PLC0415

    texts = text(table, "eventTime")
    kind = pa.timestamp("us", tz="UTC")
    try:
        exact = pc.cast(texts, pa.timestamp("ns", tz="UTC"))
        return pc.cast(exact, kind, safe=False)  # truncated to microseconds, like datetime
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # one odd time: each on its own
        return pa.chunked_array([pa.array([_parsed(t) for t in texts.to_pylist()], kind)], kind)


def _parsed(value: str | None) -> datetime | None:
    try:
        return None if value is None else parse_event_time(value)
    except ValueError:
        return None
