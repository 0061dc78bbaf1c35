"""`BlobChangeFeedSource`: the change feed as a Spark data source named `blobchangefeed`, for
`spark.readStream` (micro-batches, `Trigger.AvailableNow`) and `spark.read` (a time range).

The driver plans (one long-lived Python worker per query: `latestOffset`, `partitions`); the
executors read (`read`, a pickled copy of the reader without its driver state). Partitions are
chunk ranges, read with the columnar decoder into Arrow batches of the change log's schema.
Register it with `spark.dataSource.register(BlobChangeFeedSource)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from observers.builtin.spark.tables import columns_ddl
from observers.changes import CHANGES_SCHEMA
from processor.changefeed.position import FeedPosition
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.streaming.feed_view import FeedView
from processor.streaming.offsets import StreamOffset
from processor.streaming.options import SourceOptions
from processor.streaming.planning import Budget, ChunkRange, chunk_ranges
from processor.streaming.range_reader import RangeReading, read_range

NAME = "blobchangefeed"
SCHEMA = columns_ddl(CHANGES_SCHEMA)


class BlobChangeFeedSource(DataSource):
    """The Azure Blob Storage change feed, one row per event in the change log's columns."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BlobChangeFeedStreamReader(SourceOptions.parse(self.options, streaming=True), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BlobChangeFeedBatchReader(SourceOptions.parse(self.options, streaming=False), schema)


class RangePartition(InputPartition):
    """One chunk range, and the `read_timestamp` of its rows (its micro-batch's)."""

    def __init__(self, chunk_range: ChunkRange, read_at: datetime) -> None:
        super().__init__(chunk_range)
        self.read_at = read_at


class _Driver:
    """The driver's event loop and its look at the feed, opened on first use (never pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.loop = asyncio.new_event_loop()
        self.storage = FeedStorage.from_connection_string(options.conn_str)
        self.view = FeedView(
            self.storage,
            account=options.account,
            window=options.window,
            fail_on_data_loss=options.fail_on_data_loss,
            now=lambda: datetime.now(UTC),
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.storage.close())
        self.loop.close()


class _Reading:
    """What the stream and batch readers share: options, the driver's state, the executors'
    read."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # the executors read with their own clients
        return state

    @property
    def driver(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(self.options)
        return self._driver

    def start(self) -> StreamOffset:
        account, starting = self.options.account, self.options.starting
        if isinstance(starting, FeedPosition):
            return StreamOffset(account, starting)
        if starting == "latest":
            d = self.driver
            return StreamOffset(account, d.loop.run_until_complete(d.view.end_of_feed()))
        return StreamOffset(account)

    def offset(self, doc: dict[str, Any]) -> StreamOffset:
        return StreamOffset.from_dict(doc, account=self.options.account)

    def ranges(self, start: StreamOffset, end: StreamOffset) -> list[RangePartition]:
        read_at = end.read_at or datetime.now(UTC)
        planned = chunk_ranges(
            start.position, end.position, split_bytes=self.options.partition_bytes
        )
        return [RangePartition(r, read_at) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        how = RangeReading(
            self.options.events,
            self.options.stream_name,
            partition.read_at,
            self.options.fail_on_data_loss,
        )
        arrow = to_arrow_schema(self.schema, timezone="UTC")
        loop = asyncio.new_event_loop()
        storage = FeedStorage.from_connection_string(self.options.conn_str)
        tables = read_range(storage, partition.value, how)
        try:
            while True:
                try:
                    table = loop.run_until_complete(anext(tables))
                except StopAsyncIteration:
                    break
                yield from table.select(arrow.names).cast(arrow).to_batches()
        finally:
            loop.run_until_complete(tables.aclose())
            loop.run_until_complete(storage.close())
            loop.close()

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None


class BlobChangeFeedStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._initial: StreamOffset | None = None
        self._target: StreamOffset | None = None  # Trigger.AvailableNow: nothing after it
        self._lag: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        """The same on every call (Spark may ask more than once)."""
        if self._initial is None:
            self._initial = self.start()
        return self._initial.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_events is not None:
            return ReadMaxRows(o.max_events)
        if o.max_bytes is not None:
            return ReadMaxBytes(o.max_bytes)
        if o.max_files is not None:
            return ReadMaxFiles(o.max_files)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        d = self.driver
        begin = self.offset(start)
        until = None if self._target is None else self._target.position
        end = d.loop.run_until_complete(d.view.latest(begin, self.budget(limit), until=until))
        self._lag = d.view.lag(end.position)
        return end.to_dict()

    def budget(self, limit: ReadLimit) -> Budget:
        """Every limit the options set (Spark passes only one of them), and Spark's."""
        o = self.options
        events, size, files = o.max_events, o.max_bytes, o.max_files
        if isinstance(limit, ReadMaxRows):
            events = min(events or limit.max_rows, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            size = min(size or limit.max_bytes, limit.max_bytes)
        elif isinstance(limit, ReadMaxFiles):
            files = min(files or limit.max_files, limit.max_files)
        return Budget(events, size, files)

    def prepareForTriggerAvailableNow(self) -> None:
        d = self.driver
        self._target = StreamOffset(
            self.options.account, d.loop.run_until_complete(d.view.end_of_feed())
        )

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """How far the feed goes beyond the last planned batch (Spark shows it as the
        progress's `latestOffset`)."""
        return self._lag

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self.ranges(self.offset(start), self.offset(end))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets in Spark's checkpoint are the stream's only state."""


class BlobChangeFeedBatchReader(_Reading, DataSourceReader):
    """`spark.read`: everything consumable now from `startingOffsets` or
    `startingTimestamp`, up to `endingTimestamp`."""

    def partitions(self) -> Sequence[InputPartition]:
        d = self.driver
        start = self.start()
        planned: list[RangePartition] = []
        try:
            while True:
                end = d.loop.run_until_complete(d.view.latest(start, Budget()))
                if end == start:
                    return planned or [InputPartition(None)]
                planned.extend(self.ranges(start, end))
                start = end
        finally:
            self.stop()  # Spark calls no stop() on a batch reader

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return super().read(partition)
