"""A window decoded into its JSON lines a piece at a time: the pieces it is cut into, and a
damaged block in a later piece, which ends the window there as it ends a window decoded whole
(the lines of every piece are compared with fastavro's in test_columnar.py)."""

from __future__ import annotations

import itertools

import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.decoding.avro_chunk import BlockSpan, parse_header, scan_blocks
from processor.changefeed.decoding.columnar import NativeDecoder
from processor.changefeed.decoding.window_lines import Pieces, _pieces, decode_lines
from tests.unit.processor.changefeed.decoding.test_columnar import (
    damaged,
    fastavro_records,
    four_blocks,
)


@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=30), size=st.integers(1, 200))
def test_pieces_are_consecutive_runs_of_about_their_size(sizes: list[int], size: int) -> None:
    blocks, at = [], 0
    for n in sizes:
        blocks.append(BlockSpan(at, 1, at + 2, at + n))
        at += n + 16
    pieces = list(_pieces(blocks, size))
    assert [b for p in pieces for b in p] == blocks and all(pieces)
    for piece in pieces:  # within its size, unless one block alone is larger
        assert len(piece) == 1 or piece[-1].end - piece[0].offset <= size
    for piece, after in itertools.pairwise(pieces):  # and as large as it fits
        assert after[0].end - piece[0].offset > size


def test_a_damaged_block_in_a_later_piece_ends_the_window_there() -> None:
    data, offset = damaged("count one too high")  # the second of four blocks of 3
    header = parse_header(data, chunk="c")
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c").blocks
    decoded = decode_lines(
        data, base=0, blocks=blocks, header=header, chunk="c", rows=lambda _: None,
        pieces_of=Pieces(1, NativeDecoder(min_records=1)),  # a block a piece
    )  # fmt: skip
    assert decoded.error is not None and decoded.error.offset == offset
    assert decoded.blocks == blocks[:1]
    lines = b"".join(orjson.dumps(r) + b"\n" for r in fastavro_records(four_blocks()[0])[:3])
    assert bytes(decoded.line_bytes(0, 3)) == lines
