"""`--observer jsonl:DIR`: every delivered event as one JSON line in `DIR/<host>.jsonl`.

One file per host process, shared by the observers of all its leases. A batch is written and
flushed before `process_arrow` returns, so the checkpoint that follows never runs ahead of the
file. With `--format native` (the default) a line says who delivered the event (`host`, `lease`,
`epoch`, and `t`, the wall time of delivery in nanoseconds, for reading deliveries of several
hosts back in order), a summary, and the record itself under `event`; with `envelope`, `debezium`
or `ydb` a line is exactly that format's document.
"""

from __future__ import annotations

import re
import threading
import time
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


class JsonlObserver:
    def __init__(
        self, directory: str | Path, *, host_name: str, fmt: Format = Format.NATIVE
    ) -> None:
        self.path = Path(directory) / f"{_SAFE.sub('_', host_name)}.jsonl"
        self.format = fmt
        self._file, self._lock = _shared_file(self.path)

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Lines from the batch's columns: each record's JSON is embedded as it is, never made
        into a dict and back."""
        if self.format is not Format.NATIVE:
            self._write(format_lines(batch, self.format))
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
        head = {"host": ctx.host_name, "lease": ctx.lease_token, "epoch": ctx.epoch}
        lines = b"".join(
            orjson.dumps(
                {
                    **head,
                    "id": event_id,
                    "subject": subject or "",
                    "sequencer": sequencer,
                    "eventType": event_type,
                    "segment": batch.segment,
                    "position": position,
                    "t": now,
                    "event": orjson.Fragment(raw),
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
            for event_id, subject, sequencer, event_type, position, raw in columns
        )
        self._write(lines)

    def _write(self, lines: bytes) -> None:
        with self._lock:
            self._file.write(lines)
            self._file.flush()
