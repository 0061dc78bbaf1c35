"""A deterministic stream of blob operations, chosen from a model of the account's blobs.

Pure: the model changes by what each operation is meant to do, never by what storage answered,
so the same seed and the same starting blobs always give the same operations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum


class OpKind(Enum):
    CREATE = "create"
    DELETE = "delete"
    SET_METADATA = "set-metadata"
    SET_PROPERTIES = "set-properties"
    SNAPSHOT = "snapshot"
    SET_TIER = "set-tier"
    SET_TAGS = "set-tags"


CONTENT_TYPES = ("application/octet-stream", "text/plain", "application/json", "image/png")
# A few names that exercise escaping and non-ASCII paths end to end.
ODD_NAMES = (
    "dir/sub dir/space name.txt",
    "unicode/啊齄丂狛狜.bin",
    "a+b=c&d.json",
    "percent%2Fname",
)


@dataclass(slots=True)
class BlobModel:
    content_type: str = CONTENT_TYPES[0]
    size: int = 0
    tier: str = "Hot"
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    container: str
    name: str
    size: int = 0
    content_type: str = ""
    metadata: tuple[tuple[str, str], ...] = ()
    tier: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    previous: BlobModel | None = None  # the blob as it was before this operation

    @property
    def key(self) -> tuple[str, str]:
        return (self.container, self.name)


def op_kinds(schema_version: int) -> list[tuple[OpKind, int]]:
    """Operation kinds and weights available for a schema version."""
    kinds = [
        (OpKind.CREATE, 40),
        (OpKind.DELETE, 10),
        (OpKind.SET_METADATA, 12),
        (OpKind.SET_PROPERTIES, 12),
        (OpKind.SNAPSHOT, 6),
    ]
    if schema_version >= 4:
        kinds.append((OpKind.SET_TIER, 8))
    if schema_version >= 5:
        kinds.append((OpKind.SET_TAGS, 8))
    return kinds


class Workload:
    """Chooses the next operation; `blobs` is the model of every live blob."""

    def __init__(
        self,
        rng: random.Random,
        *,
        containers: list[str],
        blobs_per_container: int,
        schema_version: int,
        max_blob_bytes: int = 2048,
        existing: dict[tuple[str, str], BlobModel] | None = None,
    ) -> None:
        self._rng = rng
        self._containers = containers
        self._space = blobs_per_container
        self._kinds, self._weights = zip(*op_kinds(schema_version), strict=True)
        self._max_bytes = max_blob_bytes
        self.blobs: dict[tuple[str, str], BlobModel] = dict(existing or {})

    def _new_name(self) -> tuple[str, str]:
        container = self._rng.choice(self._containers)
        i = self._rng.randrange(self._space)
        if i < len(ODD_NAMES) and self._rng.random() < 0.5:
            return container, ODD_NAMES[i]
        return container, f"data/{i % 7}/blob-{i:05d}.bin"

    def next_op(self) -> Op:
        kind = self._rng.choices(self._kinds, self._weights)[0]
        if kind is not OpKind.CREATE and self.blobs:
            key = self._rng.choice(sorted(self.blobs))
            return self._apply(kind, key)
        return self._apply(OpKind.CREATE, self._new_name())

    def _apply(self, kind: OpKind, key: tuple[str, str]) -> Op:
        rng = self._rng
        before = self.blobs.get(key)
        prev = (
            BlobModel(before.content_type, before.size, before.tier, dict(before.tags))
            if before
            else None
        )
        c, n = key
        if kind is OpKind.CREATE:
            size = rng.randrange(self._max_bytes + 1)
            ctype = rng.choice(CONTENT_TYPES)
            self.blobs[key] = BlobModel(ctype, size)
            return Op(kind, c, n, size=size, content_type=ctype, previous=prev)
        assert before is not None
        if kind is OpKind.DELETE:
            del self.blobs[key]
            return Op(kind, c, n, previous=prev)
        if kind is OpKind.SET_METADATA:
            meta = (("owner", f"team{rng.randrange(5)}"), ("rev", str(rng.randrange(1000))))
            return Op(kind, c, n, metadata=meta, previous=prev)
        if kind is OpKind.SET_PROPERTIES:
            ctype = rng.choice([t for t in CONTENT_TYPES if t != before.content_type])
            before.content_type = ctype
            return Op(kind, c, n, content_type=ctype, previous=prev)
        if kind is OpKind.SNAPSHOT:
            return Op(kind, c, n, previous=prev)
        if kind is OpKind.SET_TIER:
            tier = "Cool" if before.tier == "Hot" else "Hot"
            before.tier = tier
            return Op(kind, c, n, tier=tier, previous=prev)
        tags = {"state": rng.choice(("new", "seen", "done")), "n": str(rng.randrange(100))}
        before.tags = tags
        return Op(kind, c, n, tags=tuple(sorted(tags.items())), previous=prev)
