"""What a lease's batch is made of, as the host hands it to observers: `ChangeEvent`s one at a
time (`EventBatch`, what `process_changes` receives) or Arrow columns (`ArrowBatch`, what
`process_arrow` receives). An `EventBatch` is a view of an `ArrowBatch`: its events are made
from the columns on first access, and only for observers that ask for them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast, overload

from observers.envelope import (
    BACKFILL_EVENT,
    Envelope,
    Op,
    ReadMethod,
    blob_properties,
    op_of,
    sort_keys,
)
from observers.origin import Origin
from observers.subject import split_subject

if TYPE_CHECKING:  # pyarrow loads with the first batch, not with the contract (`cfp --help`)
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change feed event. `raw` is the record exactly as decoded with its chunk's schema.

    `origin` says where and when its batch was read (None: an event made by hand); with it
    `envelope()` gives the normalised view (see `observers.envelope`)."""

    id: str
    event_type: str
    event_time: datetime
    subject: str
    container: str
    blob: str
    sequencer: str
    raw: Mapping[str, Any]
    position: str = ""  # sorts like the lease's events; the same event always has the same one
    origin: Origin | None = None

    @classmethod
    def from_raw(
        cls, raw: Mapping[str, Any], *, position: str = "", origin: Origin | None = None
    ) -> ChangeEvent:
        subject = str(raw.get("subject") or "")
        container, blob = split_subject(subject) or ("", "")
        data = raw.get("data")
        sequencer = data.get("sequencer") if isinstance(data, Mapping) else None
        when = datetime.fromisoformat(str(raw.get("eventTime")))
        return cls(
            id=str(raw.get("id") or ""),
            event_type=str(raw.get("eventType") or ""),
            event_time=when.replace(tzinfo=UTC) if when.tzinfo is None else when,
            subject=subject,
            container=container,
            blob=blob or "",
            sequencer=str(sequencer or ""),
            raw=raw,
            position=position,
            origin=origin,
        )

    @property
    def read_method(self) -> ReadMethod:
        """Backfill for the initial scan's events, hint for a hint's, else the change feed."""
        if self.origin is not None and self.origin.provisional:
            return ReadMethod.HINT
        return ReadMethod.BACKFILL if self.event_type == BACKFILL_EVENT else ReadMethod.CHANGE_FEED

    @property
    def op(self) -> Op:
        return op_of(self.event_type)

    @property
    def sort_keys(self) -> tuple[str, ...]:
        return sort_keys(self.read_method, self.sequencer, self.id)

    def envelope(self) -> Envelope:
        """This event in the normalised shape; `payload` is the record as decoded."""
        origin = self.origin or Origin("", "")
        return Envelope(
            stream_name=origin.processor,
            read_method=self.read_method,
            object=self.container,
            key=self.blob,
            op=self.op,
            uuid=self.id,
            source_timestamp=self.event_time,
            read_timestamp=origin.read_at,
            sort_keys=self.sort_keys,
            payload=self.raw,
            source_metadata={
                "event_type": self.event_type,
                "sequencer": self.sequencer,
                "shard": origin.lease,
                "segment": origin.segment_path,
                "position": self.position,
                "is_deleted": self.op is Op.DELETE,
            },
        )

    def properties(self) -> dict[str, Any]:
        """The blob's properties this event carries (None where it carries none)."""
        return blob_properties(self.raw)


class ArrowBatch:
    """One batch of a lease as Arrow columns, one row per event, in the lease's order.

    - `records`: the records as decoded with their chunk's writer schema (`data` a struct,
      enums dictionary-encoded text, maps Arrow maps; the fields of that schema version).
    - `positions`: each event's `position` (a string column; see `ChangeEvent.position`).
    - `origin`: the lease, segment, processor and read time every event of the batch shares.
    - `json()`: each record as JSON text, as `cfp read` prints it; `changes()`: the rows in the
      change log's typed schema (`observers.changes.CHANGES_SCHEMA`), for writing to a table;
      `dicts()`: the records as Python dicts. Each is made on first call, then kept.

    Share, do not change: the columns are slices of the host's decoded windows.
    """

    __slots__ = ("_changes", "_dicts", "_json", "_json_of", "_records", "origin", "positions")

    def __init__(
        self,
        records: pa.Table,
        positions: pa.Array,
        origin: Origin,
        *,
        json: Callable[[], pa.Array] | None = None,
    ) -> None:
        if records.num_rows != len(positions):
            raise ValueError(f"{records.num_rows} records but {len(positions)} positions")
        self._records: pa.Table | None = records
        self._dicts: list[dict[str, Any]] | None = None
        self.positions = positions
        self.origin = origin
        self._json_of = json
        self._json: pa.Array | None = None
        self._changes: pa.Table | None = None

    @classmethod
    def from_records(
        cls, records: Sequence[Mapping[str, Any]], positions: Sequence[str], origin: Origin
    ) -> ArrowBatch:
        """A batch of records made in Python (the initial scan's): kept as they are, their
        columns inferred only if asked for."""
        import pyarrow as pa  # noqa: PLC0415

        if len(records) != len(positions):
            raise ValueError(f"{len(records)} records but {len(positions)} positions")
        batch = cls(pa.table({}), pa.array([], pa.string()), origin)
        batch._records, batch._dicts = None, [dict(r) for r in records]
        batch.positions = pa.array(positions, pa.string())
        return batch

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def provisional(self) -> bool:
        """A batch of hints (`TakesHints`): events the feed has not confirmed, at least once
        and in no order; their positions are "" (they have none in the feed)."""
        return self.origin.provisional

    def after(self, position: str) -> ArrowBatch:
        """The events above `position`, as a batch of their own (slices, nothing copied): the
        positions increase along a batch, so they are its tail."""
        lo = bisect.bisect_right(self.positions, position, key=lambda p: p.as_py())
        if lo == 0:
            return self
        tail = ArrowBatch.__new__(ArrowBatch)
        tail.positions = self.positions.slice(lo)
        tail.origin = self.origin
        tail._records = None if self._records is None else self._records.slice(lo)
        tail._dicts = None if self._dicts is None else self._dicts[lo:]
        tail._changes = None if self._changes is None else self._changes.slice(lo)
        tail._json = None if self._json is None else self._json.slice(lo)
        json_of = self._json_of
        tail._json_of = None if json_of is None else (lambda: json_of().slice(lo))
        return tail

    @property
    def records(self) -> pa.Table:
        if self._records is None:
            import pyarrow as pa  # noqa: PLC0415

            self._records = pa.Table.from_pylist(self.dicts())
        return self._records

    def dicts(self) -> list[dict[str, Any]]:
        """The records as Python dicts, exactly as fastavro decodes them."""
        if self._dicts is None:
            self._dicts = self.records.to_pylist(maps_as_pydicts="lossy")
        return self._dicts

    def json(self) -> pa.Array:
        """Each record as compact JSON text (the change log's `raw`)."""
        if self._json is None:
            if self._json_of is not None:
                self._json = self._json_of()
            else:
                from observers.changes import json_column  # noqa: PLC0415

                self._json = json_column(self.dicts())
        return self._json

    def changes(self) -> pa.Table:
        """The rows in `CHANGES_SCHEMA`. Errors: `BadEventError` for an unreadable eventTime."""
        from observers.changes import arrow_changes, records_table  # noqa: PLC0415

        if self._changes is None:
            if self._records is None and self._dicts is not None:  # made in Python
                self._changes = records_table(self._dicts, self.positions.to_pylist(), self.origin)
            else:
                self._changes = arrow_changes(
                    self.records, self.positions, self.json(), self.origin
                )
        return self._changes


class EventBatch(Sequence[ChangeEvent]):
    """One batch of a lease as `ChangeEvent`s, each made on first access from `arrow` (the
    same batch as columns, which column-wise observers read directly)."""

    __slots__ = ("_events", "_positions", "arrow")

    def __init__(self, arrow: ArrowBatch) -> None:
        self.arrow = arrow
        self._events: list[ChangeEvent | None] = [None] * len(arrow)
        self._positions: list[str] | None = None

    @classmethod
    def from_records(cls, *args: Any, **kwargs: Any) -> EventBatch:
        """The events of records made in Python: `ArrowBatch.from_records`' arguments."""
        return cls(ArrowBatch.from_records(*args, **kwargs))

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.arrow.dicts()

    @property
    def positions(self) -> list[str]:
        if self._positions is None:
            self._positions = self.arrow.positions.to_pylist()
        return self._positions

    @property
    def origin(self) -> Origin:
        return self.arrow.origin

    def __len__(self) -> int:
        return len(self._events)

    @overload
    def __getitem__(self, index: int) -> ChangeEvent: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ChangeEvent]: ...
    def __getitem__(self, index: int | slice) -> ChangeEvent | Sequence[ChangeEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        event = self._events[index]
        if event is None:
            event = self._events[index] = ChangeEvent.from_raw(
                self.records[index], position=self.positions[index], origin=self.arrow.origin
            )
        return event

    def __iter__(self) -> Iterator[ChangeEvent]:
        for i in range(len(self)):
            yield self[i]


def changes_table(events: Sequence[ChangeEvent] | ArrowBatch) -> pa.Table:
    """The events as rows of `CHANGES_SCHEMA`, in the order given. A batch (`ArrowBatch`, or
    the `EventBatch` view of one) is converted from its columns, never making a `ChangeEvent`.

    Errors: `BadEventError` when an event has no readable `eventTime`.
    """
    from observers.changes import records_table  # noqa: PLC0415

    if isinstance(events, ArrowBatch):
        return events.changes()
    if isinstance(events, EventBatch):
        return events.arrow.changes()
    origins = [e.origin for e in events]
    if None in origins:
        raise ValueError(f"event {origins.index(None)} has no origin: no change log row names it")
    return records_table(
        [e.raw for e in events], [e.position for e in events], cast("list[Origin]", origins)
    )
