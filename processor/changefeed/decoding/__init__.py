"""A chunk's bytes into records: the Avro container layout parsed without trusting any size
(`avro_chunk`), records decoded with the chunk's writer schema (`decode`), and windows of whole
blocks decoded natively into Arrow columns (`columnar`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.changefeed.decoding.avro_chunk import (
        BlockSpan,
        ChunkHeader,
        parse_header,
        scan_blocks,
    )
    from processor.changefeed.decoding.columnar import DecodedWindow, NativeDecoder, decode_window
    from processor.changefeed.decoding.decode import RawRecord, decode_blocks

__getattr__ = exports(__name__)
__all__ = [
    "BlockSpan",
    "ChunkHeader",
    "DecodedWindow",
    "NativeDecoder",
    "RawRecord",
    "decode_blocks",
    "decode_window",
    "parse_header",
    "scan_blocks",
]
