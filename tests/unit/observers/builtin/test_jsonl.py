"""`--observer jsonl:DIR`: one JSON line per delivered event."""

from __future__ import annotations

import json
from pathlib import Path

from observers import (
    ArrowBatch,
    PartitionContext,
)
from observers.builtin.jsonl import JsonlObserver, JsonlOptions
from observers.origin import Origin
from tests.unit.fakes import RAW


def ctx() -> PartitionContext:
    return PartitionContext(lease_token="03", host_name="host/a b", epoch=4)


def test_jsonl_writes_one_line_per_event_with_lease_and_epoch(tmp_path: Path) -> None:
    obs = JsonlObserver(JsonlOptions(tmp_path))
    batch = ArrowBatch.from_records(
        [RAW, {**RAW, "id": "e-2"}],
        ["p1", "p2"],
        Origin("03", "idx/segments/2026/03/04/0500/meta.json"),
    )
    obs.process_arrow(ctx(), batch)
    lines = [json.loads(x) for x in (tmp_path / "host_a_b.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["e-1", "e-2"]
    assert {(x["host"], x["lease"], x["epoch"], x["eventType"]) for x in lines} == {
        ("host/a b", "03", 4, "BlobCreated")
    }
    assert [x["position"] for x in lines] == ["p1", "p2"]
    assert lines[0]["event"] == RAW and lines[1]["event"] == {**RAW, "id": "e-2"}
