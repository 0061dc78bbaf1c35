"""Cutting a read anywhere and resuming from the saved continuation loses and repeats nothing.

Hypothesis chooses where each read stops (inside blocks, at block and chunk boundaries: blocks
hold 1 to 4 events and chunks roll over every few blocks) and when the `Publishing` segment grows
between reads. Every resumed read starts from the token of the previous one, serialised and
parsed again. The concatenation must equal one uninterrupted read of the final feed: the same
events, each shard's events in the same order, and every event of the first segment before any
of the second.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from azure.storage.blob.aio import BlobServiceClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.position import FeedPosition
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.emulator.azurite import Azurite
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.service import reset_account
from tests.helpers import EMULATOR_CONTAINERS

CONFIG = EmulatorConfig(
    seed=99, shards=(2, 3), block_events=(1, 4), chunk_bytes=6 << 10, control_every=9
)
STAGE = 12  # operations added to the Publishing segment per growth step
STAGES = 4
ACCOUNT = "devstoreaccount1"
Item = tuple[str, str, str]  # (segment, shard, id)


async def read_upto(
    conn: str, token: str | None, limit: int, batch_events: int = 250
) -> tuple[list[Item], str]:
    position = FeedPosition.from_token(token, account=ACCOUNT) if token else None
    items: list[Item] = []
    async with (
        FeedStorage.from_connection_string(conn, attempts=2) as storage,
        FeedReader(
            storage,
            position=position,
            event_filter=EventFilter(include_control=True),
            read_size=2048,
            batch_events=batch_events,
        ) as reader,
    ):
        done = reader.position
        async for batch in reader.batches():
            for k, r in enumerate(batch.records):
                items.append((batch.segment, batch.shard, str(r["id"])))
                if len(items) == limit:
                    done = reader.position_after(batch, k)
                    return items, done.to_token(account=ACCOUNT)
            done = reader.position
    return items, done.to_token(account=ACCOUNT)


def by_shard(items: list[Item]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for seg, shard, ident in items:
        out[(seg, shard)].append(ident)
    return dict(out)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=25), min_size=1, max_size=10),
    grow_after=st.sets(st.integers(min_value=0, max_value=9), max_size=STAGES),
    batch_events=st.integers(min_value=1, max_value=5),
)
def test_cut_anywhere_and_resume(
    azurite: Azurite, cuts: list[int], grow_after: set[int], batch_events: int
) -> None:
    import asyncio

    asyncio.run(_scenario(azurite.connection_string, cuts, grow_after, batch_events))


async def _scenario(conn: str, cuts: list[int], grow_after: set[int], batch_events: int) -> None:
    async with BlobServiceClient.from_connection_string(conn) as service:
        await reset_account(service, EMULATOR_CONTAINERS)
        emu = Emulator(service, CONFIG)
        first = await emu.setup()
        second = first + timedelta(hours=1)
        await emu.begin_segment(first)
        await emu.perform(40, times=[first + timedelta(seconds=i) for i in range(40)])
        await emu.finalize_segment(first + timedelta(minutes=59))
        await emu.begin_segment(second)
        grown = 0

        async def grow() -> None:
            nonlocal grown
            t = second + timedelta(minutes=grown + 1)
            await emu.perform(STAGE, times=[t] * STAGE)
            await emu.flush()
            await emu.writer.set_last_consumable(second)  # Publishing, yet consumable
            grown += 1

        await grow()
        got: list[Item] = []
        token: str | None = None
        for i, limit in enumerate(cuts):
            items, token = await read_upto(conn, token, limit, batch_events)
            got += items
            if i in grow_after and grown < STAGES:
                await grow()
        while grown < STAGES:
            await grow()
        await emu.finalize_segment(second + timedelta(minutes=59))
        rest, _ = await read_upto(conn, token, 10**9, batch_events)
        got += rest

    whole, _ = await read_upto(conn, None, 10**9)
    assert sorted(i for _, _, i in got) == sorted(i for _, _, i in whole)
    assert len(set(got)) == len(got)
    assert by_shard(got) == by_shard(whole)
    segments = [seg for seg, _, _ in got]
    assert segments == sorted(segments)  # the barrier: segment one entirely before segment two
