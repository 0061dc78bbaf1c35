"""The observers cfp ships, each written against the contract of `observers` alone, as a
plugin of a user's would be: `log` (one log line per batch), `jsonl` (every event as a JSON line
in a file per host) and `spark` (Delta Lake tables through a Spark session; loaded only when
`--observer spark` is chosen).
"""

from observers.builtin.jsonl import JsonlObserver
from observers.builtin.log import LogObserver

__all__ = ["JsonlObserver", "LogObserver"]
