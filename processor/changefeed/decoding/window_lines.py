"""A window decoded into its JSON lines a piece at a time, for a reader that keeps nothing else
(`cfp read`): a window holds at once its lines and one piece's columns and JSON, not all of
its columns and JSON (about five times its bytes, for each window decoded)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from processor.changefeed.decoding.avro_chunk import BlockSpan, ChunkHeader
from processor.changefeed.decoding.columnar import (
    NATIVE,
    DecodedWindow,
    NativeDecoder,
    decode_window,
)

# Bytes of whole blocks decoded in one call. A call has a cost of its own (the native decode
# 1-2.5 ms, the JSON about 1 ms): a read of the mixed benchmark feed took 1.2 s more CPU than
# with whole windows at 1 MiB, 0.5 s more at 2 MiB, for 50 MiB less peak RSS.
PIECE_BYTES = 2 << 20


@dataclass(frozen=True, slots=True)
class Pieces:
    """How a window is decoded a piece at a time: about `bytes` of whole blocks, by `native`."""

    bytes: int = PIECE_BYTES
    native: NativeDecoder = NATIVE


DEFAULT_PIECES = Pieces()


def decode_lines(
    buf: bytes,
    *,
    base: int,
    blocks: Sequence[BlockSpan],
    header: ChunkHeader,
    chunk: str,
    rows: Callable[[pa.Table], np.ndarray | None],
    pieces_of: Pieces = DEFAULT_PIECES,
) -> DecodedWindow:
    """`decode_window`, the records `rows` marks kept (None: every one), then `lines_only`: a
    piece of about `pieces_of.bytes` of whole blocks at a time. A damaged block ends the window
    there, as it ends a window decoded whole."""
    pieces = []
    native = pieces_of.native
    for piece in _pieces(blocks, pieces_of.bytes):
        decoded = decode_window(
            buf, base=base, blocks=piece, header=header, chunk=chunk, native=native
        )
        decoded.keep_only(rows(decoded.table))
        decoded.lines_only()
        pieces.append(decoded)
        if decoded.error is not None:
            break
    return pieces[0] if len(pieces) == 1 else DecodedWindow.of_pieces(pieces)


def _pieces(blocks: Sequence[BlockSpan], size: int) -> Iterator[Sequence[BlockSpan]]:
    """Runs of consecutive blocks of about `size` bytes (a larger block on its own)."""
    first = 0
    for i, block in enumerate(blocks):
        if i > first and block.end - blocks[first].offset > size:
            yield blocks[first:i]
            first = i
    yield blocks[first:]
