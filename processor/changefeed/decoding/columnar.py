"""Windows of whole blocks decoded into Arrow columns: one native call per window, under a
deadline, with fastavro as the fallback that names a damaged block.

The chunk's header followed by a run of whole blocks (from a block's first byte, never from a
sync marker) is itself a valid Avro container, so a window of any size decodes in one call of
polars-avro, which wraps arrow-rs's Avro decoder (arrow-avro): a tenth of fastavro's CPU per
record, and no Python object per record. A call costs about 2-7 ms whatever its size, hence
whole windows, and batches sliced from them without copying.

A native result is kept only when it is exactly what the blocks announce: as many rows as their
counts add up to. Anything else (an error, another row count, a call that misses its deadline)
goes to the fallback: fastavro decodes the window block by block (`decode.decode_blocks`),
checks that every block's records fill exactly its bytes, and names the first block that does
not (chunk, byte offset, record). The blocks before it are still delivered, as Arrow columns of
the native decoder's own schema for that header, so consumers never see the difference.

A native call that misses its deadline cannot be stopped: arrow-avro spins for ever on a block
whose count is one short of its records, with the GIL released. It is left in its daemon thread
(which dies with the process), reported once to every listener (a host stops taking work and
exits with its own code; `cfp read` stops), and every later window of the process goes to the
fallback.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import structlog

from processor.changefeed.decoding.avro_chunk import BlockSpan, ChunkHeader
from processor.changefeed.decoding.decode import decode_blocks
from processor.changefeed.errors import UndecodableBlockError
from processor.runtime import DEFAULT_DECODE_DEADLINE_S

log = structlog.get_logger("cfp.decode")

# Rows per Arrow batch the native decoder makes: more than any window holds, so that a window
# decodes into one contiguous chunk per column.
_NATIVE_BATCH_ROWS = 1 << 24
# Fewer records than this (a live feed's few new blocks) go to fastavro and then into Arrow: a
# native call cost about 5 ms of CPU through `read_avro` whatever its size (1-2.5 ms called
# directly, as now: not measured again), then about 1 us a record, against about 13.5 us a record
# for fastavro's dicts made into Arrow (bench/decode_cost, 2 cores: even at about 400 records).
MIN_NATIVE_RECORDS = 384

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StuckDecode:
    """A native call that did not return within its deadline: where, and how long it had."""

    chunk: str
    offset: int  # of the window's first block
    size: int  # bytes of the window
    deadline_s: float

    def __str__(self) -> str:
        return (
            f"{self.chunk} at byte {self.offset}: the native Avro decoder did not return "
            f"within {self.deadline_s:g} s on a window of {self.size} bytes (it is left "
            "running; the window was decoded with fastavro instead)"
        )


class NativeUnavailable(Exception):
    """No answer from the native decoder: this call missed its deadline, or an earlier call of
    the process did (the decoder is not asked again)."""


class NativeDecoder:
    """The process's native calls: their deadline, and whether one of them is stuck.

    One per process (`NATIVE`), since a stuck call holds a thread of the process for good.
    Listeners (`on_stuck`) are called once, from the thread that waited, with the stuck call.
    """

    def __init__(
        self,
        deadline_s: float = DEFAULT_DECODE_DEADLINE_S,
        *,
        min_records: int = MIN_NATIVE_RECORDS,
    ) -> None:
        self.deadline_s = deadline_s
        self.min_records = min_records  # smaller windows are decoded by fastavro
        # a call at a time per core but one, which the event loop keeps (it fetches, cuts
        # batches and writes them): more calls at once add memory (about 50 MB each for 8 MiB),
        # not speed (cfp read on 2 cores: as fast with one call at a time, 30-40 MiB less)
        self._slots = threading.BoundedSemaphore(max(1, (os.cpu_count() or 1) - 1))
        self.stuck: StuckDecode | None = None
        self.fallbacks = 0  # windows decoded by fastavro instead
        self._listeners: list[Callable[[StuckDecode], None]] = []
        self._lock = threading.Lock()

    def on_stuck(self, listener: Callable[[StuckDecode], None]) -> Callable[[], None]:
        """Call `listener` when a call gets stuck (at once if one is); returns its remover."""
        with self._lock:
            self._listeners.append(listener)
            stuck = self.stuck
        if stuck is not None:
            listener(stuck)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def call(self, fn: Callable[[], T], *, chunk: str, offset: int, size: int) -> T:
        """`fn()` in a daemon thread of its own, waited for up to the deadline (from when it
        starts: at most a call a core runs at once).

        Errors: whatever `fn` raised; `NativeUnavailable` when a call is stuck, this one (it is
        then reported) or an earlier one."""
        if self.stuck is not None:
            raise NativeUnavailable(f"the native decoder is stuck since {self.stuck.chunk}")
        result: Future[T] = Future()

        def run() -> None:
            try:
                result.set_result(fn())
            except BaseException as e:  # handed to the caller waiting on `result`
                result.set_exception(e)
            finally:
                self._slots.release()  # never, for a call stuck for good

        while not self._slots.acquire(timeout=0.2):  # a call stuck for good holds its slot
            if self.stuck is not None:
                raise NativeUnavailable(f"the native decoder is stuck since {self.stuck.chunk}")
        threading.Thread(target=run, name="cfp-native-decode", daemon=True).start()
        try:
            return result.result(timeout=self.deadline_s)
        except TimeoutError:
            if not result.done():
                self._report(StuckDecode(chunk, offset, size, self.deadline_s))
                raise NativeUnavailable("this call missed its deadline") from None
            return result.result()

    def _report(self, stuck: StuckDecode) -> None:
        with self._lock:
            first = self.stuck is None
            if first:
                self.stuck = stuck
            listeners = list(self._listeners)
        if not first:
            return
        log.error("decode.stuck", chunk=stuck.chunk, offset=stuck.offset, size=stuck.size,
                  deadline_s=stuck.deadline_s)  # fmt: skip
        for listener in listeners:
            listener(stuck)


NATIVE = NativeDecoder()
"""The process's native decoder (`cfp run` and `cfp read` set its deadline)."""


def load_in_background() -> None:
    """Start importing the native decoder and polars (about 0.4 s) in a thread of their own: a
    read that has just started lists the feed and fetches its first bytes meanwhile, waiting on
    the network with the interpreter free. The first decode waits for the import if need be."""

    def load() -> None:
        import polars  # noqa: F401, PLC0415
        import polars_avro._avro_rs  # noqa: F401, PLC0415

    threading.Thread(target=load, name="cfp-load-decoder", daemon=True).start()


def _native_read(container: bytes) -> pa.Table:
    """The container's records as polars-avro's `read_avro` gives them, from the reader behind
    it: `read_avro` plans and runs a lazy query around that reader, about 5 ms a call whatever
    the window's size (as long as decoding 1 MiB), for the same table."""
    # loaded with the first window (polars takes 0.3 s); the reader's module is polars-avro's
    # own, pinned in the locks: decoding/test_columnar.py (tests/unit) compares it with
    # `read_avro`
    import polars as pl  # noqa: PLC0415
    from polars_avro._avro_rs import AvroSource  # noqa: PLC0415
    from polars_avro._source import seekable_factory  # noqa: PLC0415

    source = AvroSource([seekable_factory(io.BytesIO(container))], False, False)
    frames = [pl.DataFrame(batch) for batch in source.batch_iter(_NATIVE_BATCH_ROWS, None)]
    if not frames:  # a header alone: its schema, no rows
        frames = [pl.DataFrame(source.schema())]
    return (frames[0] if len(frames) == 1 else pl.concat(frames)).to_arrow()


_schemas: dict[bytes, pa.Schema] = {}


def arrow_schema(header: ChunkHeader, *, chunk: str, native: NativeDecoder = NATIVE) -> pa.Schema:
    """The Arrow schema the native decoder gives records of this header (a header-only
    container decoded once per header: the chunks of a segment share theirs byte for byte).

    Errors: the native decoder's, when it cannot read this writer schema at all."""
    schema = _schemas.get(header.raw)
    if schema is None:
        table = native.call(lambda: _native_read(header.raw), chunk=chunk, offset=0, size=0)
        if len(_schemas) > 64:
            _schemas.clear()
        schema = _schemas[header.raw] = table.schema
    return schema


class DecodedWindow:
    """The records of a window's leading good blocks, one row each, and the first bad block.

    `blocks` are those of the window that decoded (all of them, unless `error` names the one
    after them); `native` says whether the native decoder made `table` (False: fastavro).
    `keep` marks the records the reader's filter delivers (None: all). The JSON of those is made
    for the whole window at once, when first asked for; so are their JSON lines, which a reader
    that prints nothing else keeps alone (`lines_only`)."""

    def __init__(
        self,
        table: pa.Table,
        blocks: tuple[BlockSpan, ...],
        error: UndecodableBlockError | None,
        *,
        native: bool,
    ) -> None:
        self.table = table
        self.blocks = blocks
        self.error = error
        self.native = native
        counts = np.fromiter((b.count for b in blocks), np.int64, len(blocks))
        self.starts = np.concatenate(([0], np.cumsum(counts)))  # each block's first row, then
        self.offsets = np.fromiter((b.offset for b in blocks), np.int64, len(blocks))
        # every row's block offset and index in its block, once (in the decode's thread)
        self._row_offsets = np.repeat(self.offsets, counts)
        self._row_indexes = np.arange(self.starts[-1], dtype=np.int64) - np.repeat(
            self.starts[:-1], counts
        )
        self.keep: np.ndarray | None = None
        self.kept_before: np.ndarray | None = None  # records kept before each row
        self._json: pa.Array | None = None
        # the kept records' JSON lines, in one column or one per piece (`of_pieces`), and how
        # many kept records come before each of those columns (then all of them)
        self._lines: tuple[pa.Array, ...] | None = None
        self._line_ends = np.zeros(1, np.int64)
        self._lock = threading.Lock()

    @classmethod
    def of_pieces(cls, pieces: Sequence[DecodedWindow]) -> DecodedWindow:
        """One window of consecutive pieces that each kept their lines only (`lines_only`):
        their blocks, their lines (not copied), and the last one's error."""
        rows = [p.table.num_rows for p in pieces]
        window = cls(
            freed_columns(sum(rows)),
            tuple(b for p in pieces for b in p.blocks),
            pieces[-1].error,
            native=all(p.native for p in pieces),
        )
        if any(p.keep is not None for p in pieces):
            keeps = [
                np.ones(n, bool) if p.keep is None else p.keep
                for p, n in zip(pieces, rows, strict=True)
            ]
            window.keep_only(np.concatenate(keeps))
        window._set_lines(tuple(lines for p in pieces for lines in p._lines or ()))
        return window

    def _set_lines(self, lines: tuple[pa.Array, ...]) -> None:
        with self._lock:
            self._lines, self._json = lines, None
            self._line_ends = np.concatenate(([0], np.cumsum([len(a) for a in lines])))
            self.table = freed_columns(self.table.num_rows)

    def rows(self, first_row: int, stop_row: int) -> tuple[np.ndarray, np.ndarray]:
        """The block offset of each row in `[first_row, stop_row)`, and its index in the block:
        the position columns of those rows (views of the window's, made with it)."""
        return self._row_offsets[first_row:stop_row], self._row_indexes[first_row:stop_row]

    def keep_only(self, keep: np.ndarray | None) -> None:
        """Deliver only the records `keep` marks (a boolean per row; None: every one)."""
        self.keep = keep
        if keep is not None:
            self.kept_before = np.concatenate(([0], np.cumsum(keep)))

    def json(self) -> pa.Array:
        """Every kept record of the window as JSON text (`record_json`), made once: the JSON
        of kept record `k` is item `k`."""
        with self._lock:
            if self._lines is not None:
                raise RuntimeError("this window kept its JSON lines only (lines_only)")
            if self._json is None:
                self._json = record_json(self.table, self.keep)
            return self._json

    def lines_only(self) -> None:
        """Keep the kept records' JSON lines and nothing else of them: the columns are freed
        (`table` keeps its row count, in a column of nulls that takes no memory). For `cfp
        read`, which prints the lines and needs nothing more of a window."""
        self._set_lines((record_json(self.table, self.keep, lines=True),))

    @property
    def has_lines(self) -> bool:
        return self._lines is not None

    def line_bytes(self, first: int, stop: int) -> bytes | memoryview:
        """The JSON lines of kept records `[first, stop)`, each ending in a newline: a view of
        the window's lines (`lines_only`), or a copy of the few that span two pieces."""
        assert self._lines is not None, "lines_only() first"
        if stop <= first:
            return memoryview(b"")
        ends = self._line_ends
        i = int(np.searchsorted(ends, first, side="right")) - 1
        j = int(np.searchsorted(ends, stop - 1, side="right")) - 1
        views = []
        for k in range(i, j + 1):
            at = int(ends[k])
            views.append(
                arrow_text(self._lines[k], max(first, at) - at, min(stop, int(ends[k + 1])) - at)
            )
        return views[0] if len(views) == 1 else b"".join(views)


def freed_columns(rows: int) -> pa.Table:
    """A table of `rows` rows whose columns were freed: one column of nulls (no memory)."""
    return pa.table({"freed": pa.nulls(rows)})


def record_json(
    records: pa.Table, keep: np.ndarray | None = None, *, lines: bool = False
) -> pa.Array:
    """Each record (each that `keep` marks, when given) as compact JSON, in a `large_string`
    column; with `lines`, each followed by a newline. Byte for byte what `orjson.dumps` writes
    of the record fastavro decodes (fields in schema order, maps in their order, nulls, UTF-8
    unescaped). polars encodes the whole table in one call: about 1.5 us a record, and about
    1 ms a call, hence whole windows. No Arrow compute: its kernels cost a process 0.4 s and
    50 MiB when first called, which `cfp read` need not pay."""
    import polars as pl  # noqa: PLC0415 - loaded with the first window

    frame = pl.from_arrow(records) if records.num_rows else None
    assert frame is None or isinstance(frame, pl.DataFrame)
    if frame is not None and keep is not None:
        frame = frame.filter(pl.Series(keep, dtype=pl.Boolean))
    if frame is None or frame.height == 0:
        return pa.array([], pa.large_string())
    text = pl.struct(pl.all()).struct.json_encode()
    encoded = frame.select(pl.concat_str(text, pl.lit("\n")) if lines else text)
    return _large_text(encoded.to_series().to_arrow())


def json_lines_column(texts: pa.Array) -> pa.Array:
    """Each text followed by a newline, as one `large_string` column (one copy, in polars)."""
    import polars as pl  # noqa: PLC0415 - loaded with the first window

    if len(texts) == 0:
        return pa.array([], pa.large_string())
    series = pl.from_arrow(texts)
    assert isinstance(series, pl.Series)
    return _large_text((series + "\n").to_arrow())


def _large_text(column: pa.Array) -> pa.Array:
    """`column` as `large_string` (what polars gives already: nothing to convert)."""
    return column if column.type == pa.large_string() else column.cast(pa.large_string())


def arrow_text(texts: pa.Array, first: int, stop: int) -> memoryview:
    """Items `[first, stop)` of a `large_string` column, end to end: a view of its data."""
    if stop <= first:
        return memoryview(b"")
    _, offsets, data = texts.buffers()
    ends = np.frombuffer(offsets, dtype=np.int64)[texts.offset :]
    return memoryview(data)[int(ends[first]) : int(ends[stop])]


def decode_window(
    buf: bytes,
    *,
    base: int,
    blocks: Sequence[BlockSpan],
    header: ChunkHeader,
    chunk: str,
    native: NativeDecoder = NATIVE,
) -> DecodedWindow:
    """Decode whole `blocks` (file offsets) held in `buf` (file bytes from offset `base`).

    Never raises for bad bytes: a block that does not decode exactly is `error` of the result,
    with the blocks before it decoded."""
    if not blocks:
        raise ValueError("a window needs at least one block")
    first, last = blocks[0], blocks[-1]
    expected = sum(b.count for b in blocks)
    body = memoryview(buf)[first.offset - base : last.end - base]
    try:
        schema = arrow_schema(header, chunk=chunk, native=native)
    except Exception as e:  # no Arrow schema for these records: fastavro's types decide
        why, schema = f"header: {_describe(e)}", None
    else:
        if expected < native.min_records:  # cheaper than a native call, and as exact
            return _fallback(
                buf, base=base, blocks=blocks, header=header, chunk=chunk, schema=schema
            )
        try:
            table = native.call(
                lambda: _native_read(b"".join((header.raw, body))),
                chunk=chunk,
                offset=first.offset,
                size=len(body),
            )
        except NativeUnavailable as e:
            why = str(e)
        except Exception as e:  # a damaged block, most likely: fastavro finds and names it
            why = _describe(e)
        else:
            if table.num_rows == expected:
                return DecodedWindow(table, tuple(blocks), None, native=True)
            why = f"{table.num_rows} rows where the blocks announce {expected} records"
    native.fallbacks += 1
    log.warning("decode.fallback", chunk=chunk, offset=first.offset, why=why)
    return _fallback(buf, base=base, blocks=blocks, header=header, chunk=chunk, schema=schema)


def _fallback(
    buf: bytes,
    *,
    base: int,
    blocks: Sequence[BlockSpan],
    header: ChunkHeader,
    chunk: str,
    schema: pa.Schema | None,
) -> DecodedWindow:
    decoded = decode_blocks(buf, base=base, blocks=blocks, skip=0, header=header, chunk=chunk)
    try:
        table = pa.Table.from_pylist(decoded.records, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:  # fastavro read what arrow-avro cannot type
        raise UndecodableBlockError(
            chunk,
            blocks[0].offset,
            f"the records decode with fastavro but do not fit the Arrow schema of their "
            f"header ({e})",
        ) from None
    return DecodedWindow(table, decoded.blocks, decoded.error, native=False)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]
