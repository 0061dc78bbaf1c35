"""`--format` of `cfp read` and of the jsonl observer, on an emulated feed, against the shapes
docs/observers.md documents (its examples are checked with the same rules)."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from processor.emulator.azurite import Azurite
from tests.format_shapes import CHECKS
from tests.helpers import ROOT, Feed, emulate_afresh, json_lines, run_cfp


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    records = await emulate_afresh(
        azurite.connection_string, seed=31, segments=2, events_per_segment=300, shards=(2, 3)
    )
    return Feed(azurite.connection_string, {str(r["id"]) for r in records})


async def _read(feed: Feed, fmt: str) -> list[dict[str, Any]]:
    result = await asyncio.to_thread(run_cfp, feed.conn, "read", "--format", fmt)
    assert result.returncode == 0, result.stderr
    return json_lines(result.stdout)


@pytest.mark.parametrize("fmt", ["envelope", "debezium", "ydb"])
async def test_read_prints_every_event_in_the_documented_shape(feed: Feed, fmt: str) -> None:
    native = await _read(feed, "native")
    docs = await _read(feed, fmt)
    assert len(docs) == len(native) == len(feed.ids)
    keys = [CHECKS[fmt](d) for d in docs]
    if fmt == "ydb":  # records carry the sequencer, not the id
        assert keys == [r["data"]["sequencer"] for r in native]
    else:
        assert keys == [r["id"] for r in native]
    ops = Counter(_op(fmt, d) for d in docs)
    types = Counter(r["eventType"] for r in native)
    assert ops["delete"] == types["BlobDeleted"] > 0
    if fmt == "debezium":
        assert ops["c"] == types["BlobCreated"] > 0
        assert ops["u"] == len(native) - types["BlobCreated"] - types["BlobDeleted"] > 0


def _op(fmt: str, doc: dict[str, Any]) -> str:
    if fmt == "envelope":
        return str(doc["op"])
    if fmt == "ydb":
        return "delete" if "erase" in doc else "upsert"
    op = str(doc["payload"]["op"])
    return "delete" if op == "d" else op


async def test_envelope_fields_come_from_the_event(feed: Feed) -> None:
    native = await _read(feed, "native")
    docs = await _read(feed, "envelope")
    for record, doc in zip(native, docs, strict=True):
        container, _, blob = record["subject"].split("/containers/")[1].partition("/blobs/")
        assert (doc["object"], doc["key"]) == (container, blob)
        assert doc["payload"] == record
        assert doc["stream_name"] == "devstoreaccount1"
        assert doc["sort_keys"][1] == record["data"]["sequencer"]
        assert doc["source_timestamp"][:19] == record["eventTime"][:19]


async def test_the_jsonl_observer_writes_the_chosen_format(feed: Feed, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = await asyncio.to_thread(
        run_cfp, feed.conn, "run", "--processor-name", "formats", "--until-caught-up",
        "--no-http", "--observer", f"jsonl:{out}", "--format", "debezium",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = [json.loads(line) for f in out.glob("*.jsonl") for line in f.open()]
    assert Counter(CHECKS["debezium"](d) for d in docs) == Counter(feed.ids)
    assert {d["payload"]["source"]["name"] for d in docs} == {"formats"}


async def test_format_is_refused_for_other_observers(feed: Feed) -> None:
    result = await asyncio.to_thread(
        run_cfp, feed.conn, "run", "--processor-name", "formats2", "--until-caught-up",
        "--no-http", "--observer", "log", "--format", "ydb",
    )  # fmt: skip
    assert result.returncode == 2
    assert "--format ydb is for the jsonl observer only" in result.stderr


def test_the_documented_examples_have_the_documented_shapes() -> None:
    readme = (ROOT / "docs" / "observers.md").read_text()
    found = {}
    for fmt, body in re.findall(r"<!-- format:(\w+) -->\s*```json\n(.*?)```", readme, re.S):
        found[fmt] = CHECKS[fmt](json.loads(body))
    assert set(found) == set(CHECKS)
