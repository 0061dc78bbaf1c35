"""Names and paths of the `$blobchangefeed` container, and the checks on paths read from manifests.

Everything here is pure string and time arithmetic. Paths inside the container never start with
`$blobchangefeed/`; manifests carry that prefix in `chunkFilePaths`, stripped after checking.
"""

from __future__ import annotations

import posixpath
import re
from datetime import UTC, datetime, timedelta

from processor.changefeed.errors import ManifestError, UnsafePathError

CONTAINER = "$blobchangefeed"
SEGMENTS_JSON = "meta/segments.json"
SEGMENT_PREFIX = "idx/segments/"
LOG_PREFIX = "log/"
INIT_SEGMENT_YEAR = "1601"
SEGMENT_INTERVAL = timedelta(hours=1)
# the largest ranged GET of a chunk by default: a host's shard readers, `cfp read --read-size`,
# and the Spark source's range reads
DEFAULT_READ_SIZE = 8 << 20

_SEGMENT_RE = re.compile(r"^idx/segments/(\d{4})/(\d{2})/(\d{2})/(\d{2})(\d{2})/meta\.json$")
_CHUNK_RE = re.compile(r"^(?P<shard>log/.+/)(?P<n>\d{5})\.avro$")


def segment_path(begin: datetime) -> str:
    """The manifest path of the segment that begins at `begin` (UTC)."""
    b = begin.astimezone(UTC)
    return f"{SEGMENT_PREFIX}{b:%Y/%m/%d/%H%M}/meta.json"


def segment_time(path: str) -> datetime:
    """The begin time encoded in a segment manifest path; `ValueError` if it is not one."""
    m = _SEGMENT_RE.match(path)
    if m is None:
        raise ValueError(f"not a segment manifest path: {path!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def is_segment_path(path: str) -> bool:
    return _SEGMENT_RE.match(path) is not None


def is_init_segment(path: str) -> bool:
    """The empty `1601/01/01/0000` initialisation segment that every feed has."""
    return path.startswith(f"{SEGMENT_PREFIX}{INIT_SEGMENT_YEAR}/")


def shard_prefix(begin: datetime, shard: int) -> str:
    """The prefix (inside the container) of shard `shard` of the segment beginning at `begin`."""
    return f"{LOG_PREFIX}{shard:02d}/{begin.astimezone(UTC):%Y/%m/%d/%H%M}/"


def chunk_path(prefix: str, number: int) -> str:
    return f"{prefix}{number:05d}.avro"


def chunk_number(path: str) -> int:
    m = _CHUNK_RE.match(path)
    if m is None:
        raise ValueError(f"not a chunk path: {path!r}")
    return int(m.group("n"))


def chunk_shard_prefix(path: str) -> str:
    m = _CHUNK_RE.match(path)
    if m is None:
        raise ValueError(f"not a chunk path: {path!r}")
    return m.group("shard")


def shard_name(prefix: str) -> str:
    """A short, stable name of a shard prefix: `log/01/2022/11/28/2100/` -> `01`."""
    return prefix[len(LOG_PREFIX) :].split("/", 1)[0]


def checked_shard_prefix(entry: object, *, manifest: str) -> str:
    """Validate one `chunkFilePaths` entry and return it relative to the container.

    Raises:
        UnsafePathError: the entry is not a plain path under `$blobchangefeed/log/` (another
            container, `..` segments, backslashes, control characters, a missing trailing `/`).
        ManifestError: the entry is not a string.
    """
    if not isinstance(entry, str):
        raise ManifestError(manifest, f"chunkFilePaths entry {entry!r} is not a string")
    head = f"{CONTAINER}/{LOG_PREFIX}"
    if not entry.startswith(head) or not entry.endswith("/"):
        raise UnsafePathError(manifest, entry)
    inner = entry[len(CONTAINER) + 1 :]
    parts = inner.rstrip("/").split("/")
    if (
        any(p in ("", ".", "..") for p in parts)
        or "\\" in inner
        or any(ord(c) < 0x20 for c in inner)
        or posixpath.normpath(inner) + "/" != inner
    ):
        raise UnsafePathError(manifest, entry)
    return inner
