"""A plain model of the state table with hints: feed records and hints applied one at a time
under the sequencer guard, and made-up scenarios (hints dropped, duplicated, reordered, late,
unconfirmed, with sequencers of another length) to check the real MERGEs against it.

The guard, as `observers/builtin/spark/state/state_table.py` writes it in SQL:
- a feed record over a confirmed row applies when its sequencer is higher; over a provisional
  row, when its sequencer is at least the hint's, or of another length (the feed wins);
- a hint (creates and deletes only) applies to a blob without a row, or over a row whose
  sequencer is lower and of the same length; its row is provisional.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from observers.changes import records_table
from observers.origin import Origin
from processor.hints.batches import hint_origin

BLOBS = [("c1", "a.txt"), ("c1", "dir/b c"), ("c2", "a.txt"), ("c2", "z")]
FEED_WIDTH = 48  # hex digits of the feed's sequencers
SHORT_WIDTH = 32  # an older Event Grid's: cannot be compared with the feed's
SEGMENT = "idx/segments/2026/01/01/0100/meta.json"


@dataclass(frozen=True)
class Change:
    blob: int
    seq: int
    kind: str  # created, deleted, props (props: the feed's alone)
    value: int
    width: int = FEED_WIDTH

    @property
    def sequencer(self) -> str:
        return f"{self.seq:0{self.width}x}"

    def record(self, prefix: str = "") -> dict[str, Any]:
        container, name = BLOBS[self.blob]
        kind = {"created": "BlobCreated", "deleted": "BlobDeleted"}.get(
            self.kind, "BlobPropertiesUpdated"
        )
        return {
            "subject": f"/blobServices/default/containers/{prefix}{container}/blobs/{name}",
            "eventType": kind,
            "eventTime": f"2026-01-01T01:{self.seq // 60 % 60:02d}:{self.seq % 60:02d}Z",
            "id": f"id-{prefix}{self.blob}-{self.seq}",
            "data": {
                "sequencer": self.sequencer,
                "etag": f"0x{self.seq:x}",
                "contentLength": self.value,
                "blobType": "BlockBlob",
            },
        }


@dataclass(frozen=True)
class Row:
    deleted: bool
    content_length: int
    sequencer: str
    provisional: bool


def apply_feed(row: Row | None, c: Change, *, guard: bool = True) -> Row:
    new = Row(c.kind == "deleted", c.value, c.sequencer, False)
    if row is None or not guard:
        return new
    if row.provisional:
        wins = len(c.sequencer) != len(row.sequencer) or c.sequencer >= row.sequencer
    else:
        wins = c.sequencer > row.sequencer
    return new if wins else row


def apply_hint(row: Row | None, c: Change, *, guard: bool = True) -> Row | None:
    if c.kind not in ("created", "deleted"):
        return row
    new = Row(c.kind == "deleted", c.value, c.sequencer, True)
    if row is None or not guard:
        return new
    comparable = len(c.sequencer) == len(row.sequencer)
    return new if comparable and c.sequencer > row.sequencer else row


State = dict[int, Row]
Pass = tuple[list[Change], list[Change]]  # (feed records, hints) taken in one state job run


def run(passes: list[Pass], *, guard: bool = True, hints_first: bool = True) -> State:
    """The state after each pass's hints, then its feed records (as one state job run takes
    them; `hints_first` False: the other way round)."""
    state: State = {}

    def feed(changes: list[Change]) -> None:
        for c in changes:
            state[c.blob] = apply_feed(state.get(c.blob), c, guard=guard)

    def hint(changes: list[Change]) -> None:
        for c in changes:
            if (row := apply_hint(state.get(c.blob), c, guard=guard)) is not None:
                state[c.blob] = row

    for fed, hinted in passes:
        if hints_first:
            hint(hinted)
        feed(fed)
        if not hints_first:
            hint(hinted)
    return state


@dataclass(frozen=True)
class Scenario:
    """A blob's feed records, the hints Event Grid sent for them (some dropped, some twice,
    some with no feed record at all: unconfirmed), and how they came: in passes, shuffled."""

    feed: list[Change]
    hints: list[Change]
    passes: list[Pass]

    def expected(self) -> State:
        """What the state must show once every feed record is in: the feed's own state, but for
        a blob with an unconfirmed hint newer than all its feed records (or with none): that
        hint, provisional."""
        out: State = {}
        for blob in {c.blob for c in self.feed + self.hints}:
            feed = [c for c in self.feed if c.blob == blob]
            fed = {(c.seq, c.kind) for c in feed}
            unconfirmed = [
                h for h in self.hints
                if h.blob == blob and (h.seq, h.kind) not in fed and h.kind != "props"
            ]  # fmt: skip
            newest_feed = max(feed, key=lambda c: c.sequencer, default=None)
            newest_hint = max(unconfirmed, key=lambda c: c.sequencer, default=None)
            if newest_hint is not None and (
                newest_feed is None
                or (
                    newest_hint.width == newest_feed.width
                    and newest_hint.sequencer > newest_feed.sequencer
                )
            ):
                out[blob] = Row(
                    newest_hint.kind == "deleted", newest_hint.value, newest_hint.sequencer, True
                )
            elif newest_feed is not None:
                out[blob] = Row(
                    newest_feed.kind == "deleted", newest_feed.value, newest_feed.sequencer, False
                )
        return out


def _scenario(draw: Any) -> Scenario:
    changes = draw(
        st.lists(
            st.builds(
                Change,
                blob=st.integers(0, len(BLOBS) - 1),
                seq=st.integers(1, 60),
                kind=st.sampled_from(["created", "deleted", "props"]),
                value=st.integers(0, 9),
            ),
            min_size=1,
            max_size=30,
            unique_by=lambda c: (c.blob, c.seq),
        )
    )
    rng: random.Random = draw(st.randoms(use_true_random=False))
    widths = {
        b: draw(st.sampled_from([FEED_WIDTH, FEED_WIDTH, SHORT_WIDTH])) for b in range(len(BLOBS))
    }
    unconfirmed_seqs = set(range(61, 70))  # never in the feed: later than any of its records
    feed = [c for c in changes if rng.random() < 0.8]  # the rest: hinted only (failover)
    hints: list[Change] = []
    for c in changes:
        if c.kind == "props" or rng.random() < 0.2:  # Event Grid has no event, or dropped it
            continue
        hint = Change(c.blob, c.seq, c.kind, c.value, widths[c.blob])
        hints += [hint] * rng.choice([1, 1, 2, 3])  # at least once
    for blob in range(len(BLOBS)):
        if rng.random() < 0.3:
            seq = rng.choice(sorted(unconfirmed_seqs))
            hints.append(Change(blob, seq, rng.choice(["created", "deleted"]), 7, widths[blob]))
    stream = [("feed", c) for c in feed] + [("hint", h) for h in hints]
    rng.shuffle(stream)  # any interleaving: hints before, after or between their records
    cuts = sorted(rng.sample(range(len(stream) + 1), k=min(3, len(stream) + 1)))
    passes: list[Pass] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        part = stream[lo:hi]
        passes.append(([c for k, c in part if k == "feed"], [c for k, c in part if k == "hint"]))
    return Scenario(feed, hints, passes)


scenarios = st.composite(_scenario)()


def feed_rows(changes: list[Change], prefix: str) -> pa.Table:
    records = [c.record(prefix) for c in changes]
    return records_table(records, [f"p{i:06d}" for i in range(len(records))], Origin("00", SEGMENT))


def hint_rows(hints: list[Change], prefix: str) -> pa.Table:
    origin = hint_origin("proc", datetime(2026, 1, 1, 2, tzinfo=UTC))
    return records_table([h.record(prefix) for h in hints], [""] * len(hints), origin)


def seen(rows: list[dict[str, Any]], prefix: str) -> State:
    """State table rows of one scenario (its containers prefixed) in the model's shape."""
    out: State = {}
    for r in rows:
        if not r["container"].startswith(prefix):
            continue
        blob = BLOBS.index((r["container"].removeprefix(prefix), r["blob"]))
        out[blob] = Row(r["deleted"], r["content_length"], r["sequencer"], bool(r["provisional"]))
    return out
