"""The recorded real feeds, served by Azurite, read back with `cfp read`."""

from __future__ import annotations

import asyncio
import io
from itertools import groupby

import fastavro
import orjson

from tests.fixtures import RECORDED, as_expected_line, expected_records
from tests.helpers import json_lines, run_cfp, upload_recorded_tree


def expected_by_shard(root, segment_dirs):  # type: ignore[no-untyped-def]
    out = {}
    for chunk in sorted(root.glob("log/*/**/*.avro")):
        seg = "/".join(chunk.relative_to(root).parts[2:6])
        if seg in segment_dirs:
            out[chunk.parent.relative_to(root).as_posix()] = expected_records(chunk)
    return out


async def test_recorded_2022_feed_reads_exactly_as_recorded(account: str) -> None:
    root = RECORDED / "python-recording-2022"
    await upload_recorded_tree(account, root, last_consumable="2022-11-28T22:00:00.000Z")
    result = await asyncio.to_thread(run_cfp, account, "read", "--include-control")
    assert result.returncode == 0, result.stderr
    lines = [as_expected_line(r) for r in json_lines(result.stdout)]
    # the 2100 segment is Finalized, 2200 is Publishing: both consumable, 2200 read as it stands
    expected = expected_by_shard(root, {"2022/11/28/2100", "2022/11/28/2200"})
    assert sorted(lines) == sorted(line for v in expected.values() for line in v)
    # every shard's records come in file order, and 2100 entirely before 2200 (the barrier)
    got = json_lines(result.stdout)
    times = [r["eventTime"][:13] for r in got if r["eventType"] != "Control"]
    assert [k for k, _ in groupby(times)] == ["2022-11-28T21", "2022-11-28T22"]
    for shard, want in expected.items():
        subjects = {line for line in want}
        assert [line for line in lines if line in subjects] == want, shard


async def test_recorded_2020_feed_skips_the_init_segment(account: str) -> None:
    root = RECORDED / "python-recording-2020"
    await upload_recorded_tree(account, root, last_consumable="2020-08-12T00:00:00.000Z")
    result = await asyncio.to_thread(run_cfp, account, "read")
    assert result.returncode == 0, result.stderr
    chunk = root / "log/00/2020/08/12/0000/00000.avro"
    assert [as_expected_line(r) for r in json_lines(result.stdout)] == expected_records(chunk)
    # byte for byte what `orjson` writes of fastavro's records (what `cfp read` printed before
    # the columnar decoder): each line made from Arrow columns
    records = [
        r for r in fastavro.reader(io.BytesIO(chunk.read_bytes())) if r["eventType"] != "Control"
    ]
    assert result.stdout.encode() == b"".join(
        orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records
    )
