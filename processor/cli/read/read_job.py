"""What `cfp read` runs once its options are parsed (`ReadOptions`): where it resumes from, and
the read itself (the feed reader, the catalog, the Azure SDK), loaded only when a read starts."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import BinaryIO

import click

from observers.formats import Format
from processor import connection
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.decoding.columnar import load_in_background
from processor.changefeed.errors import FeedError
from processor.changefeed.feed_reader import FeedReader, IncompleteRead, ShardFailure
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.sdk_token import from_sdk_token, is_sdk_token, to_sdk_token, url_host
from processor.changefeed.selection import EventFilter, TimeRange
from processor.changefeed.shard_batch import ShardBatch
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.cli.common import fail, say_error, unless_decoder_stuck
from processor.cli.read.lines import formatted_lines

SAVE_EVERY_S = 1.0


class TokenFormat(StrEnum):
    """What `--save-continuation` writes (`cfp read --token-format`)."""

    CFP = "cfp"
    SDK = "sdk"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Every option of `cfp read` (read_command.py), as click parsed it."""

    connection_string: str | None
    start_time: datetime | None
    end_time: datetime | None
    containers: tuple[str, ...]
    blob_prefix: str
    event_types: tuple[str, ...]
    blob_types: tuple[str, ...]
    continuation: str | None
    save_continuation: Path | None
    token_format: str
    max_events: int | None
    follow: bool
    poll_interval: float
    include_control: bool
    output_format: str
    read_size: int
    decode_deadline: float


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a read starts, and the end time an SDK token carried."""

    position: FeedPosition | None = None
    end_time: datetime | None = None


def load_continuation(value: str | None, *, account: str, host: str) -> Resume:
    """`--continuation TOKEN` or `@FILE`: ours or an SDK's, told apart by `CursorVersion`.

    Errors: `InvalidContinuation` naming what is wrong; a missing file exits 2."""
    if value is None:
        return Resume()
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.exists():
            fail(f"continuation file {path} does not exist", 2)
        value = path.read_text()
    text = value.strip()
    if not text:  # what --token-format sdk saves when nothing was read: the beginning
        return Resume()
    if is_sdk_token(text):
        cursor = from_sdk_token(text, host=host)
        return Resume(cursor.position, cursor.end_time)
    return Resume(FeedPosition.from_token(text, account=account))


def read_job(o: ReadOptions) -> ReadJob:
    """The read `o` asks for, from where its continuation says. Exits 2 (`fail`) when the
    connection string or the continuation cannot be used: nothing was read yet."""
    conn = connection.resolve(o.connection_string)
    try:
        info = connection.parse(conn)
    except ValueError as e:
        fail(str(e), 2)
    host = url_host(info.blob_endpoint)
    try:
        resume = load_continuation(o.continuation, account=info.account, host=host)
    except FeedError as e:
        fail(str(e), 2)
    return ReadJob(
        conn=conn,
        account=info.account,
        host=host,
        resume=resume,
        event_filter=event_filter(o, resume),
        fmt=Format(o.output_format),
        read_size=o.read_size,
        follow=o.follow,
        poll_interval=o.poll_interval,
        max_events=o.max_events,
        save_to=o.save_continuation,
        token_format=TokenFormat(o.token_format),
    )


def event_filter(o: ReadOptions, resume: Resume) -> EventFilter:
    """What the read prints: the filter options, and the time window, which ends where an SDK
    token said unless `--end-time` is given (a handed-over read keeps the SDK's bound)."""
    return EventFilter(
        change=ChangeFilter.of(
            containers=o.containers,
            blob_prefix=o.blob_prefix,
            event_types=o.event_types,
            blob_types=o.blob_types,
        ),
        window=TimeRange(o.start_time, o.end_time or resume.end_time),
        include_control=o.include_control,
    )


def _write_atomically(path: Path, text: str) -> None:
    """A crash leaves either the old token or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


@dataclass(slots=True)
class ReadJob:
    conn: str
    account: str
    host: str
    resume: Resume
    event_filter: EventFilter
    fmt: Format
    read_size: int
    follow: bool
    poll_interval: float
    max_events: int | None
    save_to: Path | None
    token_format: TokenFormat
    out: BinaryIO = field(default_factory=lambda: sys.stdout.buffer)
    printed: int = 0
    _shard_ends: dict[str, dict[str, ShardPosition]] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> int:
        """Read, print and save positions until done or `stop`; the exit status. A native
        decode that gets stuck stops the read (exit 3)."""
        return await unless_decoder_stuck(self._read(stop), stop.set)

    async def _read(self, stop: asyncio.Event) -> int:
        load_in_background()  # while the feed is listed and its first bytes fetched
        out = self.out
        async with (
            FeedStorage.from_connection_string(self.conn) as storage,
            FeedReader(
                storage,
                position=self.resume.position,
                event_filter=self.event_filter,
                read_size=self.read_size,
                with_json=self.fmt is Format.NATIVE,
            ) as reader,
        ):
            catalog = FeedCatalog(storage, refresh_s=0)
            done = reader.position
            last_save = time.monotonic()

            async def save(pos: FeedPosition) -> None:
                out.flush()  # events first: a saved position never runs ahead of the output
                if self.save_to is not None:
                    _write_atomically(self.save_to, await self._token(pos, catalog))

            try:
                batches = reader.batches(
                    follow=self.follow, poll_interval_s=self.poll_interval, stop=stop
                )
                async with aclosing(batches):
                    async for batch in batches:
                        limit = self.max_events
                        if limit is not None and self.printed + len(batch) >= limit:
                            take = limit - self.printed
                            out.write(await self._lines(batch, take))
                            self.printed += take
                            done = reader.position_after(batch, take - 1)
                            break
                        out.write(await self._lines(batch, len(batch)))
                        self.printed += len(batch)
                        done = reader.position
                        if time.monotonic() - last_save >= SAVE_EVERY_S:
                            await save(done)
                            last_save = time.monotonic()
                    else:
                        done = reader.position
            except IncompleteRead as e:
                return self._incomplete(e.failures)
            except FeedError as e:
                say_error(e)
                return 1
            finally:
                await save(done)
        # a read stopped early (a signal, a stuck decoder) may have met bad data already
        return self._incomplete(list(reader.failures.values())) if reader.failures else 0

    def _incomplete(self, failures: list[ShardFailure]) -> int:
        for f in failures:
            say_error(f"shard {f.shard}: {f.error}")
        click.echo(
            f"cfp: read {self.printed} events; the position stops before the bad data", err=True
        )
        return 1

    async def _lines(self, batch: ShardBatch, count: int) -> bytes | memoryview:
        """Native lines are cut from the window's JSON, made where it was decoded: cheap enough
        for the loop. Other formats make a document per event: in a thread, so that the loop
        goes on fetching and decoding the shards meanwhile."""
        make = partial(
            formatted_lines,
            batch,
            count,
            self.fmt,
            processor=self.account,
            read_at=datetime.now(UTC),
        )
        return make() if self.fmt is Format.NATIVE else await asyncio.to_thread(make)

    async def _token(self, position: FeedPosition, catalog: FeedCatalog) -> str:
        if self.token_format is TokenFormat.CFP:
            return position.to_token(account=self.account)
        if position.segment is None:
            return ""  # nothing read: an SDK starts from the beginning without a token
        ends = None
        if position.is_segment_done:  # listed once per finished segment, not at every save
            ends = self._shard_ends.get(position.segment)
            if ends is None:
                ends = self._shard_ends[position.segment] = await catalog.shard_ends(
                    position.segment
                )
        return to_sdk_token(
            position, host=self.host, end_time=self.event_filter.window.end, shard_ends=ends
        )
