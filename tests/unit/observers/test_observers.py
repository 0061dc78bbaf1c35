"""The observer contract: events built from raw records, plugin loading, sync and async methods."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from observers import (
    ChangeEvent,
    CloseReason,
    EventBatch,
    LeaseLostError,
    ObserverCalls,
    ObserverChoice,
    PartitionContext,
    PluginLoadError,
    checkpoints_after_each_batch,
    load_observer_factory,
    needs_segment_order,
    singleton_jobs,
)
from observers.jsonl import JsonlObserver
from observers.log import LogObserver

RAW = {
    "schemaVersion": 5,
    "topic": "/subscriptions/x",
    "subject": "/blobServices/default/containers/photos/blobs/2026/a b.jpg",
    "eventType": "BlobCreated",
    "eventTime": "2026-03-04T05:06:07.1234567Z",
    "id": "e-1",
    "data": {"sequencer": "00000000000000010000000000000002000000000000001d", "api": "PutBlob"},
}


def ctx() -> PartitionContext:
    return PartitionContext(lease_token="03", host_name="host-a", epoch=4)


def test_change_event_from_a_raw_record() -> None:
    e = ChangeEvent.from_raw(RAW, shard="03", segment="idx/segments/2026/03/04/0500/meta.json")
    assert (e.id, e.event_type, e.container, e.blob) == (
        "e-1",
        "BlobCreated",
        "photos",
        "2026/a b.jpg",
    )
    assert e.event_time == datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    assert e.sequencer == RAW["data"]["sequencer"]  # type: ignore[index]
    assert e.raw is RAW and e.shard == "03"


def test_built_in_and_module_observers_load() -> None:
    assert load_observer_factory(ObserverChoice("log"), host_name="h") is LogObserver
    assert isinstance(
        load_observer_factory(ObserverChoice("jsonl:/tmp/x"), host_name="h")(), JsonlObserver
    )
    assert (
        load_observer_factory(ObserverChoice("tests.plugins:PacedJsonl"), host_name="h").__name__
        == "PacedJsonl"
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nope", "expected log, jsonl:DIR, spark or module:Name"),
        ("jsonl:", "needs a directory"),
        ("no_such_module_x:Thing", "cannot import"),
        ("tests.plugins:Missing", "has no attribute Missing"),
        ("json:dumps", None),  # a callable factory is accepted at load time
        ("observers.protocol:CloseReason", "has no process_changes"),
        ("spark", "needs --output"),
    ],
)
def test_bad_observer_specs_say_what_is_wrong(spec: str, problem: str | None) -> None:
    if problem is None:
        load_observer_factory(ObserverChoice(spec), host_name="h")
        return
    with pytest.raises(PluginLoadError, match=problem):
        load_observer_factory(ObserverChoice(spec), host_name="h")


def test_an_instance_without_process_changes_is_refused() -> None:
    with pytest.raises(PluginLoadError, match="no process_changes"):
        ObserverCalls(object(), spec="x:y")


async def test_plain_methods_run_in_a_thread_and_async_ones_in_the_loop() -> None:
    seen: dict[str, int] = {}

    class Mixed:
        auto_checkpoint = False

        def open(self, c: PartitionContext) -> None:
            seen["open"] = threading.get_ident()

        async def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            seen["process"] = threading.get_ident()

        def close(self, c: PartitionContext, reason: CloseReason) -> None:
            seen["close"] = threading.get_ident()

    calls = ObserverCalls(Mixed())
    await calls.open(ctx())
    await calls.process_changes(ctx(), [])
    await calls.close(ctx(), CloseReason.SHUTDOWN)
    loop_thread = threading.get_ident()
    assert seen["process"] == loop_thread
    assert seen["open"] != loop_thread and seen["close"] != loop_thread
    assert calls.auto_checkpoint is False


async def test_open_and_close_are_optional() -> None:
    class OnlyProcess:
        def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            pass

    calls = ObserverCalls(OnlyProcess())
    await calls.open(ctx())
    await calls.close(ctx(), CloseReason.LEASE_LOST)
    assert calls.auto_checkpoint is True


@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_a_lease_no_longer_ours_is_checked_just_before_the_method(kind: str) -> None:
    """The host's checks come before a thread hop (plain methods) and retry pauses: a host paused
    in between must not hand the batch over once it resumes with the lease gone."""
    checked_in: list[int] = []
    ran: list[str] = []

    class Plain:
        def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            ran.append("plain")

    class Async:
        async def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            ran.append("async")

    def still_ours() -> bool:
        checked_in.append(threading.get_ident())
        return len(checked_in) == 1  # ours the first time, lost afterwards

    calls = ObserverCalls(Plain() if kind == "plain" else Async())
    await calls.process_changes(ctx(), [], still_ours=still_ours)
    with pytest.raises(LeaseLostError):
        await calls.process_changes(ctx(), [], still_ours=still_ours)
    assert ran == [kind]
    on_loop = checked_in[0] == threading.get_ident()
    assert on_loop is (kind == "async")  # a plain method's check runs in its own thread


def test_jsonl_writes_one_line_per_event_with_lease_and_epoch(tmp_path: Path) -> None:
    obs = JsonlObserver(tmp_path, host_name="host/a b")
    obs.process_changes(
        ctx(), [ChangeEvent.from_raw(RAW), ChangeEvent.from_raw({**RAW, "id": "e-2"})]
    )
    lines = [json.loads(x) for x in (tmp_path / "host_a_b.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["e-1", "e-2"]
    assert {(x["host"], x["lease"], x["epoch"], x["eventType"]) for x in lines} == {
        ("host-a", "03", 4, "BlobCreated")
    }


def test_an_event_batch_makes_the_same_events_lazily() -> None:
    other = {**RAW, "id": "e-2", "subject": "/blobServices/default/containers/c/blobs/x"}
    read_at = datetime(2026, 1, 1, tzinfo=UTC)
    batch = EventBatch.from_records(
        [RAW, other],
        ["p0", "p1"],
        shard="03",
        segment="idx/s",
        stream_name="proc",
        read_timestamp=read_at,
    )
    assert batch._events == [None, None]  # nothing made before it is asked for
    eager = [
        ChangeEvent.from_raw(
            r, shard="03", segment="idx/s", position=p, stream_name="proc", read_timestamp=read_at
        )
        for r, p in ((RAW, "p0"), (other, "p1"))
    ]
    assert batch[1] == eager[1] and batch._events[0] is None
    assert list(batch) == eager and batch[:] == eager and batch[-1] == eager[1]
    assert batch[0] is batch[0]  # made once
    assert len(batch) == 2 and bool(EventBatch.from_records([], [], shard="", segment="")) is False
    with pytest.raises(ValueError, match="2 records but 1 positions"):
        EventBatch.from_records([RAW, other], ["p0"], shard="03", segment="idx/s")


def test_what_observers_declare_beyond_the_contract_and_the_defaults() -> None:
    class Plain:
        def process_changes(self, ctx: object, events: object) -> None: ...

    class Buffering(Plain):
        auto_checkpoint = False

    class OrderedFactory:
        needs_segment_order = False
        jobs = ("a job",)

    assert checkpoints_after_each_batch(Plain()) and not checkpoints_after_each_batch(Buffering())
    assert needs_segment_order(Plain) and not needs_segment_order(OrderedFactory())
    assert singleton_jobs(Plain) == () and singleton_jobs(OrderedFactory()) == ("a job",)
