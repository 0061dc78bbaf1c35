"""The change log's write protocol against a model of Delta's optimistic concurrency: racing,
stale (zombie), failed and replayed writers leave each event exactly once and no gap.

The model: a write reads the table as of the version it starts from and inserts the rows of its
leases it did not see (`MERGE ... WHEN NOT MATCHED THEN INSERT`); it commits only if no commit
since that version added rows to one of its leases' partitions, else it is refused and run again
later on the newer table (what Delta does for a MERGE confined by `shard IN (...)`, checked on
real tables in tests/integration/test_delta_tables.py). The writers follow the host: a lease is
read from its checkpoint in batches cut anywhere, a host's batches of several leases share a
write, a checkpoint moves only after the commit that holds the batch, never back, and a write
that failed makes its host read the lease again from the checkpoint.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from observers.spark.changelog import lease_ranges

LEASES = ("00", "01")


@dataclass
class Commit:
    leases: set[str]
    rows: list[tuple[str, str]]


@dataclass
class ModelDelta:
    commits: list[Commit] = field(default_factory=list)

    def rows(self, version: int | None = None) -> list[tuple[str, str]]:
        return [r for c in self.commits[:version] for r in c.rows]

    def merge(self, read_at: int, batch: dict[str, list[str]]) -> bool:
        """Insert `batch`'s rows absent as of `read_at`; False (nothing done) on a conflict."""
        touched = {lease for lease, keys in batch.items() if keys}
        if any(c.leases & touched for c in self.commits[read_at:]):
            return False
        seen = set(self.rows(read_at))
        new = [(lease, k) for lease, keys in batch.items() for k in keys if (lease, k) not in seen]
        self.commits.append(Commit({lease for lease, _ in new}, new))
        return True


@dataclass
class Host:
    cursor: dict[str, int] = field(default_factory=dict)  # next event to read, per lease
    queued: list[tuple[str, int, int]] = field(default_factory=list)  # batches not yet written
    write: tuple[int, list[tuple[str, int, int]]] | None = None  # (read version, its batches)


def table_of(batches: list[tuple[str, int, int]], keys: list[str]) -> dict[str, pa.Table]:
    per_lease: dict[str, list[str]] = {}
    for lease, lo, hi in batches:
        per_lease.setdefault(lease, []).extend(keys[lo:hi])
    return {lease: pa.table({"position": ks}) for lease, ks in per_lease.items()}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_interleaving_of_writers_leaves_each_event_once_and_no_gap(
    data: st.DataObject,
) -> None:
    keys = [f"{i:04d}" for i in range(data.draw(st.integers(1, 30), label="events"))]
    delta = ModelDelta()
    checkpoint = dict.fromkeys(LEASES, 0)
    hosts = [Host() for _ in range(2)]
    for _ in range(data.draw(st.integers(1, 80), label="steps")):
        host = data.draw(st.sampled_from(hosts))
        action = data.draw(st.sampled_from(["open", "read", "begin", "commit", "fail"]))
        lease = data.draw(st.sampled_from(LEASES))
        if action == "open":  # takes the lease (or takes it back): from its checkpoint
            host.cursor[lease] = checkpoint[lease]
            host.queued = [b for b in host.queued if b[0] != lease]
        elif action == "read" and lease in host.cursor and host.cursor[lease] < len(keys):
            lo = host.cursor[lease]
            hi = min(lo + data.draw(st.integers(1, 7)), len(keys))
            host.queued.append((lease, lo, hi))
            host.cursor[lease] = hi
        elif action == "begin" and host.write is None and host.queued:
            n = data.draw(st.integers(1, len(host.queued)))  # a write's share of the queue
            host.write, host.queued = (len(delta.commits), host.queued[:n]), host.queued[n:]
        elif action == "commit" and host.write is not None:  # possibly long after it began
            read_at, batches = host.write
            ranges = lease_ranges(table_of(batches, keys))  # the MERGE's partitions and ranges
            assert all(r.first <= r.last for r in ranges)
            per_lease = {r.lease: [k for k in keys if r.first <= k <= r.last] for r in ranges}
            if delta.merge(read_at, per_lease):
                for b_lease, _, hi in batches:  # then the checkpoints, never back
                    checkpoint[b_lease] = max(checkpoint[b_lease], hi)
                host.write = None
            else:
                host.write = (len(delta.commits), batches)  # refused: run again on the new table
        elif action == "fail" and host.write is not None:  # Spark failed: nothing committed
            failed = {b[0] for b in host.write[1]}
            host.write, host.cursor = None, {}
            host.queued = [b for b in host.queued if b[0] not in failed]
        counts = Counter(delta.rows())
        assert all(n == 1 for n in counts.values()), "an event twice"
        for each in LEASES:
            mine = sorted(k for lease, k in counts if lease == each)
            assert mine == keys[: len(mine)], "a gap"
            assert checkpoint[each] <= len(mine), "a checkpoint past what is written"
    for each in LEASES:  # a last owner catches up from the checkpoint
        assert delta.merge(len(delta.commits), {each: keys[checkpoint[each] :]})
    assert sorted(delta.rows()) == sorted((lease, k) for lease in LEASES for k in keys)
