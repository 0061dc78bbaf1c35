"""Each held lease's recent read rate, written with its renewals for `--balance-by load`.

An exponentially weighted mean of the bytes/s read between renewals, over about six renewal
intervals (a minute at the defaults): long enough that one batch does not make a lease look hot,
short enough that a shard that turned hot is seen within a minute or two. Bytes are counted as
records are delivered, each block's size spread over its records (`ShardBatch.read_share`). It
starts from the rate the previous owner wrote, so a lease that just moved does not look idle (and
move again) while its new owner measures it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW_RENEWALS = 6  # the mean's window, in renewal intervals


@dataclass(slots=True)
class ReadRate:
    rate: float  # bytes/s
    total: int | None = None  # bytes read when last sampled
    at: float | None = None  # monotonic time of that sample

    def sample(self, total: int, now: float, *, window_s: float) -> float:
        """Feed the lease's bytes read so far (a counter that only grows) at time `now`."""
        if self.total is not None and self.at is not None and now > self.at:
            instant = max(0, total - self.total) / (now - self.at)
            weight = 1.0 - math.exp(-(now - self.at) / window_s)
            self.rate += weight * (instant - self.rate)
        self.total, self.at = total, now
        return self.rate
