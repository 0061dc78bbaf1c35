"""`--observer jsonl:DIR`: every delivered event as one JSON line in `DIR/<host>.jsonl`.

One file per host process, shared by the observers of all its leases. A batch is written and
flushed before `process_changes` returns, so the checkpoint that follows never runs ahead of the
file. Lines carry `t`, the wall time of delivery in nanoseconds, for reading deliveries of several
hosts back in order.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import orjson

from observers.protocol import ChangeEvent, PartitionContext

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
    def __init__(self, directory: str | Path, *, host_name: str) -> None:
        self.path = Path(directory) / f"{_SAFE.sub('_', host_name)}.jsonl"
        self._file, self._lock = _shared_file(self.path)

    def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        now = time.time_ns()
        lines = b"".join(
            orjson.dumps(
                {
                    "host": ctx.host_name,
                    "lease": ctx.lease_token,
                    "epoch": ctx.epoch,
                    "id": e.id,
                    "subject": e.subject,
                    "sequencer": e.sequencer,
                    "eventType": e.event_type,
                    "segment": e.segment,
                    "t": now,
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
            for e in events
        )
        with self._lock:
            self._file.write(lines)
            self._file.flush()
