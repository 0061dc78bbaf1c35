"""Typed errors of the change feed reader.

Every error carries the fields an operator needs to find the bad spot (blob path, byte offset,
manifest path) as attributes, not only in its text. `FeedUnavailable` is the one retryable kind:
storage did not answer. `FeedCorrupt` and its subclasses are about the bytes themselves and are
never retried: the reader stops in front of them and keeps its position.
"""

from __future__ import annotations


class FeedError(Exception):
    """Base class of everything the change feed reader raises on purpose."""

    retryable: bool = False


class FeedUnavailable(FeedError):
    """Storage did not answer (timeout, 5xx, 429, connection refused); worth retrying later."""

    retryable = True


class FeedNotEnabled(FeedError):
    """The account has no `$blobchangefeed` container."""


class UnsafeEndpoint(FeedError):
    """The emulator was pointed at an endpoint that is not on the loopback interface."""


class InvalidContinuation(FeedError):
    """A continuation token could not be parsed or does not fit this feed."""


class FeedCorrupt(FeedError):
    """Bytes or documents in the feed that cannot be what the service writes."""


class PathProblem(FeedCorrupt):
    """Something is wrong with the blob at `path` as a whole."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class ManifestError(PathProblem):
    """A manifest (`meta/segments.json` or a segment's `meta.json`) is not valid."""


class UnsafePathError(ManifestError):
    """A manifest names a chunk path outside `$blobchangefeed/log/`."""

    def __init__(self, path: str, entry: str) -> None:
        super().__init__(path, f"chunkFilePaths entry {entry!r} is outside $blobchangefeed/log/")
        self.entry = entry


class ChunkError(FeedCorrupt):
    """A chunk file (`log/NN/.../NNNNN.avro`) is not a valid Avro object container."""

    def __init__(self, chunk: str, offset: int, problem: str) -> None:
        super().__init__(f"{chunk} at byte {offset}: {problem}")
        self.chunk = chunk
        self.offset = offset
        self.problem = problem


class BadMagicError(ChunkError):
    """The chunk does not start with the Avro magic `Obj\\x01`."""


class TruncatedHeaderError(ChunkError):
    """The chunk ends inside its Avro header."""


class BadHeaderError(ChunkError):
    """The Avro header is malformed (metadata map, schema or codec)."""


class BadSyncMarkerError(ChunkError):
    """A block is not followed by the sync marker from the chunk's header."""


class UndecodableBlockError(ChunkError):
    """A block's records cannot be decoded with the chunk's writer schema."""


class TruncatedBlockError(ChunkError):
    """A finalized chunk ends inside a block: bytes that will never arrive."""


class PositionError(ChunkError):
    """A saved position does not fit the chunk (past its end, or not on a block)."""


class MissingChunkError(PathProblem):
    """A position names a chunk or segment that no longer exists (retention or deletion)."""
