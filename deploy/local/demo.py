"""`make demo`: emulate a workload in a throw-away Azurite, read the feed back, show a summary.

Everything runs locally and is removed afterwards: an Azurite on free loopback ports with its
data in a temporary folder, `cfp emulate` writing a few hourly segments from real blob
operations, then `cfp read` (the library behind it) reading them back twice: once whole, once
in two halves joined by a saved continuation token. The summary shows that both reads agree and
that the feed explains the live listing of the account.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from azure.storage.blob.aio import BlobServiceClient  # noqa: E402

from processor.changefeed.emulator.azurite import Azurite  # noqa: E402
from processor.changefeed.emulator.emulator import Emulator, EmulatorConfig  # noqa: E402
from processor.changefeed.feed_reader import FeedReader  # noqa: E402
from processor.changefeed.layout import shard_name  # noqa: E402
from processor.changefeed.position import FeedPosition, RawRecord  # noqa: E402
from processor.changefeed.storage import FeedStorage  # noqa: E402
from processor.logs import configure_logging  # noqa: E402

CONFIG = EmulatorConfig(seed=2026, segments=4, events_per_segment=1500, shards=(2, 3, 1, 4))


async def read(
    conn: str, position: FeedPosition | None, limit: int | None
) -> tuple[list[tuple[str, str, RawRecord]], FeedPosition]:
    out: list[tuple[str, str, RawRecord]] = []
    async with (
        FeedStorage.from_connection_string(conn) as storage,
        FeedReader(storage, position=position) as reader,
    ):
        async for batch in reader.batches():
            for k, r in enumerate(batch.records):
                out.append((batch.segment, shard_name(batch.shard), r))
                if limit is not None and len(out) == limit:
                    return out, reader.position_after(batch, k)
        return out, reader.position


async def live_listing(conn: str) -> dict[str, str]:
    listing = {}
    async with BlobServiceClient.from_connection_string(conn) as service:
        async for c in service.list_containers():
            if c.name.startswith("$"):
                continue  # the feed itself is not a blob the feed describes
            async for b in service.get_container_client(c.name).list_blobs():
                listing[f"/blobServices/default/containers/{c.name}/blobs/{b.name}"] = (
                    b.etag or ""
                ).strip('"')
    return listing


async def demo(conn: str) -> int:
    n, per = CONFIG.segments, CONFIG.events_per_segment
    print(f"1. emulating {n} hourly segments x {per} real blob operations ...")
    t = time.perf_counter()
    async with BlobServiceClient.from_connection_string(conn) as service:
        summary = await Emulator(service, CONFIG).run_batch()
    print(f"   done in {time.perf_counter() - t:.1f}s: {', '.join(summary.segments)}")

    print("2. reading the whole feed back ...")
    t = time.perf_counter()
    whole, _ = await read(conn, None, None)
    seconds = time.perf_counter() - t
    print(f"   {len(whole):,} events in {seconds:.2f}s ({len(whole) / seconds:,.0f} events/s)")

    half = len(whole) // 2
    first, position = await read(conn, None, half)
    token = position.to_token(account="devstoreaccount1")
    second, _ = await read(conn, FeedPosition.from_token(token, account="devstoreaccount1"), None)
    resumed = [r["id"] for _, _, r in first + second]
    same = sorted(resumed) == sorted(r["id"] for _, _, r in whole)
    print(
        f"3. read again in two halves through a {len(token)}-byte continuation token: "
        f"{'same events' if same else 'MISMATCH'}"
    )

    print("\n   events by type:")
    for etype, n in sorted(Counter(str(r["eventType"]) for _, _, r in whole).items()):
        print(f"     {etype:<24}{n:>7,}")
    print("   events by segment and shard:")
    by_seg: dict[str, Counter[str]] = {}
    for seg, shard, _ in whole:
        by_seg.setdefault(seg, Counter())[shard] += 1
    for seg, shards in by_seg.items():
        cells = "  ".join(f"{s}:{n:,}" for s, n in sorted(shards.items()))
        print(f"     {seg[len('idx/segments/') : -len('/meta.json')]}   {cells}")

    last: dict[str, RawRecord] = {}
    for _, _, r in whole:
        last[str(r["subject"])] = r
    alive = {s: str(r["data"]["etag"]) for s, r in last.items() if r["eventType"] != "BlobDeleted"}  # type: ignore[index]
    listing = await live_listing(conn)
    ok = alive == listing
    print(
        f"\n4. the feed explains the live listing: {len(listing):,} live blobs, "
        f"{'every one matches its last event (etag)' if ok else 'MISMATCH'}"
    )
    return 0 if ok and same else 1


def main() -> None:
    configure_logging(level="INFO")
    with tempfile.TemporaryDirectory(prefix="cfp-demo-") as tmp:
        azurite = Azurite(Path(tmp)).start()
        try:
            code = asyncio.run(demo(azurite.connection_string))
        finally:
            azurite.stop()
    print(
        "\nNext: `make azurite` in one terminal, `cfp emulate` and `cfp read` in another (README)."
    )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
