from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from observers.origin import Origin, segment_begin


def test_segment_begin_reads_the_manifest_path() -> None:
    path = "idx/segments/2026/01/01/0130/meta.json"
    assert segment_begin(path) == datetime(2026, 1, 1, 1, 30, tzinfo=UTC)
    assert Origin("00", path).segment_begin == datetime(2026, 1, 1, 1, 30, tzinfo=UTC)


def test_the_initial_scan_begins_when_it_started() -> None:
    started = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert Origin("scan-00", f"scan/{started.isoformat()}").segment_begin == started


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1)))
def test_every_hour_and_minute_of_a_segment_path_reads_back(when: datetime) -> None:
    hour = when.replace(second=0, microsecond=0, tzinfo=UTC)
    path = f"idx/segments/{hour:%Y/%m/%d/%H%M}/meta.json"
    assert segment_begin(path) == hour


def test_an_origin_is_read_now_unless_told() -> None:
    before = datetime.now(UTC)
    origin = Origin("00", "idx/segments/2026/01/01/0000/meta.json", "proc")
    assert before <= origin.read_at <= datetime.now(UTC)
    assert origin == Origin("00", origin.segment_path, "proc", origin.read_at)
