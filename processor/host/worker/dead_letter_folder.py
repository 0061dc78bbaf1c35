"""What a host does with a batch its observer keeps failing on: `--on-observer-error`.

`retry` (the default) never gives up while the lease is ours; `stop` parks the lease in front of
the batch; `dead-letter` writes the batch and the error to a folder, then checkpoints past it.
A dead letter is one JSON Lines file: a header line (lease, epoch, host, positions, error), then
each record as decoded. It is written to a temporary name and renamed, so a reader never sees
half a file, and its name is derived from the batch's start position, so a batch dead-lettered
twice (a crash before the checkpoint) is one file.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A batch given up on: whose it was (processor, lease, epoch, host), where it stands
    (`start` to `end`), why, when, and its records as decoded."""

    processor: str
    lease: str
    epoch: int
    host: str
    start: str
    end: str
    error: str
    at: datetime
    records: Sequence[Mapping[str, Any]]


class DeadLetterFolder:
    """`ROOT/<processor>/<lease>/<start position digest>.jsonl`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def write(self, letter: DeadLetter) -> Path:
        """Write one dead letter; returns its path. Errors: OSError (the batch stays unhandled)."""
        d = letter
        folder = self.root / _SAFE.sub("_", d.processor) / _SAFE.sub("_", d.lease)
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(d.start.encode()).hexdigest()[:24] + ".jsonl"
        header = {
            "deadLetter": 1,
            "processor": d.processor,
            "lease": d.lease,
            "epoch": d.epoch,
            "host": d.host,
            "from": d.start,
            "to": d.end,
            "events": len(d.records),
            "error": d.error,
            "at": d.at.isoformat(),
        }
        lines = [orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)]
        lines += [orjson.dumps(r, default=str, option=orjson.OPT_APPEND_NEWLINE) for r in d.records]
        path = folder / name
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        with tmp.open("wb") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        return path
