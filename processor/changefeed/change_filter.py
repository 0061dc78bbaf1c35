"""Which changes a processor (or `cfp read`) delivers: by container, blob name prefix, event type
and blob type. The change feed has no server-side filter, so every event is read and this
decides, on the client, before the observer sees anything.

A filtered-out event is still read past: the checkpoint moves over it like over a delivered one.
`BlobBackfill` events of an initial scan are not changes: the event-type filter lets them
through, the other three apply to them as to any event.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from observers.envelope import BACKFILL_EVENT
from observers.subject import split_subject

if TYPE_CHECKING:
    import pyarrow as pa


class FilterError(ValueError):
    """A filter that cannot be stored or parsed, with what was wrong."""


def blob_path(subject: object) -> tuple[str, str] | None:
    """`(container, blob name)` from an event's subject, None when it names no blob."""
    parts = split_subject(subject)
    if parts is None or parts[1] is None:
        return None
    return parts[0], parts[1]


@dataclass(frozen=True, slots=True)
class ChangeFilter:
    """Empty fields accept everything; each non-empty one must match (an AND of the four)."""

    containers: tuple[str, ...] = ()  # names or fnmatch globs (`logs-*`), any of them
    blob_prefix: str = ""
    event_types: frozenset[str] = frozenset()
    blob_types: frozenset[str] = frozenset()
    _container_match: re.Pattern[str] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # a feed names few containers, each over and over: their verdicts are kept
    _verdicts: dict[str, bool] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.containers:
            joined = "|".join(fnmatch.translate(g) for g in self.containers)
            object.__setattr__(self, "_container_match", re.compile(joined))

    @classmethod
    def of(
        cls,
        *,
        containers: Iterable[str] = (),
        blob_prefix: str = "",
        event_types: Iterable[str] = (),
        blob_types: Iterable[str] = (),
    ) -> ChangeFilter:
        """The filter of these options, in a canonical form (sorted, duplicates dropped), so
        that the same options always make an equal filter."""
        return cls(
            tuple(sorted(set(containers))),
            blob_prefix,
            frozenset(event_types),
            frozenset(blob_types),
        )

    @property
    def is_empty(self) -> bool:
        return not (self.containers or self.blob_prefix or self.event_types or self.blob_types)

    @property
    def looks_at_blob(self) -> bool:
        return bool(self.containers or self.blob_prefix)

    def mask(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Which records (rows of `table`) this filter accepts; None when it accepts all.
        Arrow compute over the batch; each container name met is judged once."""
        import pyarrow as pa  # noqa: PLC0415 - loaded with the first batch, not by `cfp --help`
        import pyarrow.compute as pc  # noqa: PLC0415

        from processor.changefeed.record_columns import TEXT, blob_paths, text  # noqa: PLC0415

        if self.is_empty:
            return None
        conditions = []
        if self.event_types:
            wanted = pa.array(sorted({*self.event_types, BACKFILL_EVENT}), TEXT)
            conditions.append(pc.is_in(text(table, "eventType"), value_set=wanted))
        if self.blob_types:
            wanted = pa.array(sorted(self.blob_types), TEXT)
            conditions.append(pc.is_in(text(table, "data", "blobType"), value_set=wanted))
        if self.containers or self.blob_prefix:
            where = blob_paths(table)
            conditions.append(pc.is_valid(where))
            if self.blob_prefix:
                names = pc.struct_field(where, "blob")
                conditions.append(pc.starts_with(names, self.blob_prefix))
            if self.containers:
                containers = pc.struct_field(where, "container")
                met = pc.unique(containers).drop_null().to_pylist()
                wanted = pa.array([c for c in met if self.accepts_container(c)], TEXT)
                conditions.append(pc.is_in(containers, value_set=wanted))
        keep = conditions[0]
        for condition in conditions[1:]:
            keep = pc.and_kleene(keep, condition)
        return pc.fill_null(keep, False)

    def accepts_blob(self, container: str, name: str) -> bool:
        """Whether the container and blob-prefix parts accept this blob (the initial scan
        leaves out whole containers with it)."""
        if self.blob_prefix and not name.startswith(self.blob_prefix):
            return False
        return self.accepts_container(container)

    def accepts_container(self, container: str) -> bool:
        if self._container_match is None:
            return True
        verdict = self._verdicts.get(container)
        if verdict is None:
            verdict = self._container_match.fullmatch(container) is not None
            if len(self._verdicts) < 100_000:
                self._verdicts[container] = verdict
        return verdict

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.containers:
            doc["containers"] = list(self.containers)
        if self.blob_prefix:
            doc["blobPrefix"] = self.blob_prefix
        if self.event_types:
            doc["eventTypes"] = sorted(self.event_types)
        if self.blob_types:
            doc["blobTypes"] = sorted(self.blob_types)
        return doc

    @classmethod
    def from_json(cls, doc: object, *, where: str) -> ChangeFilter:
        """Errors: `FilterError` naming `where` the document came from."""
        if not isinstance(doc, dict):
            raise FilterError(f"{where}: the filter {doc!r} is not an object")

        def names(key: str) -> list[str]:
            value = doc.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise FilterError(f"{where}: filter field {key!r} is not a list of strings")
            return value

        prefix = doc.get("blobPrefix", "")
        if not isinstance(prefix, str):
            raise FilterError(f"{where}: filter field 'blobPrefix' is not a string")
        return cls.of(
            containers=names("containers"),
            blob_prefix=prefix,
            event_types=names("eventTypes"),
            blob_types=names("blobTypes"),
        )

    def describe(self) -> str:
        """One line for people: `everything`, or the fields that narrow it."""
        if self.is_empty:
            return "everything"
        parts = []
        if self.containers:
            parts.append("container " + " or ".join(self.containers))
        if self.blob_prefix:
            parts.append(f"blob prefix {self.blob_prefix!r}")
        if self.event_types:
            parts.append("event type " + " or ".join(sorted(self.event_types)))
        if self.blob_types:
            parts.append("blob type " + " or ".join(sorted(self.blob_types)))
        return ", ".join(parts)

    def text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
