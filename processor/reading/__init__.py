"""Reading one lease's share of the feed: the position a lease stores (`lease_position`), its
reader across segments (`lease_reader`) or through the initial scan (`scan_reader`), the batch
either hands its worker (`lease_batch`), the segment
barrier (`barrier`, `position_book`), retention gaps, what a processor delivers
(`processor_identity`), and how far behind a lease is (`backlog`, `lag`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.reading.backlog import bytes_left
    from processor.reading.lag import events_left, time_lag_s
    from processor.reading.lease_batch import LeaseBatch
    from processor.reading.lease_position import LeasePosition, ScanPosition
    from processor.reading.lease_reader import LeaseReader
    from processor.reading.position_book import PositionBook
    from processor.reading.processor_identity import ProcessorIdentity, claim_identity
    from processor.reading.retention_gaps import OnGap, position_after_gap
    from processor.reading.scan_reader import ScanReader

__getattr__ = exports(__name__)
__all__ = [
    "LeaseBatch",
    "LeasePosition",
    "LeaseReader",
    "OnGap",
    "PositionBook",
    "ProcessorIdentity",
    "ScanPosition",
    "ScanReader",
    "bytes_left",
    "claim_identity",
    "events_left",
    "position_after_gap",
    "time_lag_s",
]
