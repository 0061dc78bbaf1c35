"""Records as JSON lines, the output of `cfp read` (and what the benchmark times)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import orjson

from processor.changefeed.position import RawRecord

_dump_line = partial(orjson.dumps, option=orjson.OPT_APPEND_NEWLINE)


def json_lines(records: Iterable[RawRecord]) -> bytes:
    """One compact JSON object per record, each ending in a newline (UTF-8, keys in order)."""
    return b"".join(map(_dump_line, records))
