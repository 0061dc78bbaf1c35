"""Paths of the recorded change feed files (real service output) shared with the project."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT.parent / "shared" / "fixtures" / "azure-recorded"
if not RECORDED.exists():  # a clone elsewhere: allow pointing at the fixtures explicitly
    import os

    RECORDED = Path(os.environ.get("CFP_RECORDED_FIXTURES", RECORDED))

RECORDED_CHUNKS = sorted(RECORDED.glob("python-recording-*/log/**/*.avro"))
if not RECORDED_CHUNKS:
    raise RuntimeError(
        f"no recorded chunks under {RECORDED}: put shared/ beside the checkout or set "
        "CFP_RECORDED_FIXTURES"
    )
SERVICE_SYNC = bytes.fromhex("0d070f0c04040c00010901070b0f0e09")


def expected_records(chunk: Path) -> list[str]:
    """The expected decoded records of a recorded chunk, one JSON text per record."""
    return chunk.with_name(chunk.name + ".expected.jsonl").read_text(encoding="utf-8").splitlines()


def as_expected_line(record: dict[str, Any]) -> str:
    """Render a record the way the expected files were rendered."""
    return json.dumps(record, default=str, ensure_ascii=False)
