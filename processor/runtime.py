"""Process-wide settings for the long-running, decode-heavy `cfp` commands (`read`, `run`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys

# Young-generation threshold for the cyclic collector. Decoding creates about five tracked
# containers per change record; with CPython's default (700) a collection runs every ~140
# records and rescans the records still waiting in batches. Change records hold no cycles, so
# collecting young objects every ~10,000 records instead loses nothing and saved 5-10 % of
# `cfp read` time in bench/read_throughput.py.
GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect less often and keep start-up objects (modules, schemas) out of every collection."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


# Decoded windows are allocated by the native decoder and polars (jemalloc: the records, their
# JSON) and by the download (glibc malloc); with an arena per thread each keeps what it freed.
# Two glibc arenas and one jemalloc arena took `cfp read`'s peak RSS on the benchmark feed from
# about 530 MiB to about 395 MiB. jemalloc keeps what it freed for a quarter of a second before
# it gives it back: every window allocates about ten times its bytes (decoded records, JSON,
# lines), and pages given back at once (a decay of 0) came back as page faults, 400,000 of them
# in a read of the mixed benchmark feed, a third of its time (2.85 s against 2.26 s; a decay of
# a second was no faster and held 50 MiB more on the large-block feed).
GLIBC_ARENAS = 2
M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h
JEMALLOC_CONF_VAR = "_RJEM_MALLOC_CONF"  # what polars' jemalloc reads when it starts
JEMALLOC_CONF = "narenas:1,dirty_decay_ms:250,muzzy_decay_ms:0"


def tune_memory() -> None:
    """Fewer allocator arenas, before any native library allocates: polars' jemalloc reads its
    settings when polars is first imported (a setting already in the environment is kept)."""
    os.environ.setdefault(JEMALLOC_CONF_VAR, JEMALLOC_CONF)
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its defaults stand
        return
    mallopt(M_ARENA_MAX, GLIBC_ARENAS)


def keep_pandas_out() -> None:
    """Tell pyarrow, before anything else asks it, that there is no pandas to convert from.

    pyarrow learns whether pandas is installed by importing it, at the first array it makes
    (`pa.array`, `pa.table`...), and keeps the answer for the process: on a development install
    that costs `cfp read` 1-2 s of importing pandas it never uses. Only for commands that load no
    plugin (`cfp read`, `cfp run` with the log or jsonl observer): pyarrow's own pandas
    conversions (`to_pandas`, `from_pandas`) still import it when called, but an array made from
    a pandas object would be read as a plain sequence."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa  # noqa: PLC0415 - the caller is about to read with it anyway

    hidden = _NoPandas()
    sys.meta_path.insert(0, hidden)  # `import pandas` fails meanwhile
    try:
        pa.array([], pa.null())  # pyarrow's one look for pandas, answered "none"
    finally:
        sys.meta_path.remove(hidden)


class _NoPandas:
    """An import finder that says pandas is not installed."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("hidden from pyarrow's first look", name=name)


# Seconds a native Avro decode of one window may take before it is judged stuck (`--decode-
# deadline`). A window of 8 MiB takes 20-150 ms on 2 busy cores; the margin is for machines far
# busier than that, since a call judged stuck makes its host leave (exit `DECODER_STUCK_EXIT`).
DEFAULT_DECODE_DEADLINE_S = 30.0
DECODER_STUCK_EXIT = 3
"""Exit status of `cfp run` and `cfp read` after a native decode missed its deadline: the call
cannot be stopped and holds a core, so the process leaves to be restarted."""
