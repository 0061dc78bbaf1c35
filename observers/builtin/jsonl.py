"""`--observer jsonl:DIR`: every delivered event as one JSON line in `DIR/<host>.jsonl`.

One file per host process, shared by the observers of all its leases. A batch is written and
flushed before `process_arrow` returns, so the checkpoint that follows never runs ahead of the
file. With `--format native` (the default) a line says who delivered the event (`host`, `lease`,
`epoch`, and `t`, the wall time of delivery in nanoseconds, for reading deliveries of several
hosts back in order), a summary, and the record itself under `event`; with `envelope`, `debezium`
or `ydb` a line is exactly that format's document. A hint (`cfp run --hints-queue`) is a line
like any other, with `"provisional": true`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import orjson

from observers.events import ArrowBatch
from observers.formats import Format, format_lines
from observers.protocol import PartitionContext

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_files: dict[Path, tuple[IO[bytes], threading.Lock]] = {}
_files_lock = threading.Lock()


def _shared_file(path: Path) -> tuple[IO[bytes], threading.Lock]:
    with _files_lock:
        if path not in _files:
            path.parent.mkdir(parents=True, exist_ok=True)
            _files[path] = (path.open("ab"), threading.Lock())
        return _files[path]


@dataclass(frozen=True, slots=True)
class JsonlOptions:
    """`--observer jsonl:DIR` sets `directory`; `--format` sets `format`."""

    directory: Path = field(metadata={"help": "the folder of the host's file, DIR/<host>.jsonl"})
    format: Format = field(default=Format.NATIVE, metadata={"help": "the JSON shape of a line"})


class JsonlObserver:
    Options = JsonlOptions

    def __init__(self, options: JsonlOptions) -> None:
        self.options = options
        self._out: tuple[IO[bytes], threading.Lock] | None = None  # the host's file, at first use

    def path(self, host_name: str) -> Path:
        return Path(self.options.directory) / f"{_SAFE.sub('_', host_name)}.jsonl"

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Lines from the batch's columns: each record's JSON is embedded as it is, never made
        into a dict and back."""
        self._lines(ctx, batch)

    def process_hints(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Hints as lines of their own, each with `"provisional": true` (and `lease` "hints",
        `position` ""): the feed's line for the same change comes later, or never."""
        self._lines(ctx, batch)

    def _lines(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        if self.options.format is not Format.NATIVE:
            self._write(ctx, format_lines(batch, self.options.format))
            return
        now = time.time_ns()
        rows = batch.changes()
        names = batch.records.column_names
        subjects = batch.records.column("subject") if "subject" in names else None
        columns = zip(
            rows.column("id").to_pylist(),
            [""] * len(batch) if subjects is None else subjects.to_pylist(),
            rows.column("sequencer").to_pylist(),
            rows.column("event_type").to_pylist(),
            rows.column("position").to_pylist(),
            batch.json().to_pylist(),
            strict=True,
        )
        head: dict[str, object] = {
            "host": ctx.host_name,
            "lease": ctx.lease_token,
            "epoch": ctx.epoch,
        }
        if batch.provisional:
            head["provisional"] = True
        lines = b"".join(
            orjson.dumps(
                {
                    **head,
                    "id": event_id,
                    "subject": subject or "",
                    "sequencer": sequencer,
                    "eventType": event_type,
                    "segment": batch.origin.segment_path,
                    "position": position,
                    "t": now,
                    "event": orjson.Fragment(raw),
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
            for event_id, subject, sequencer, event_type, position, raw in columns
        )
        self._write(ctx, lines)

    def _write(self, ctx: PartitionContext, lines: bytes) -> None:
        if self._out is None:
            self._out = _shared_file(self.path(ctx.host_name))
        file, lock = self._out
        with lock:
            file.write(lines)
            file.flush()
