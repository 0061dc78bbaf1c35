"""How the Spark observer logs a wait before it tries something again."""

from __future__ import annotations

from collections.abc import Callable

import structlog
from tenacity import RetryCallState

log = structlog.get_logger("cfp.spark")


def logged_wait(event: str, **fields: object) -> Callable[[RetryCallState], None]:
    """A tenacity `before_sleep` that logs `event` with `fields`, the attempt that failed and
    the wait before the next one."""

    def before_sleep(state: RetryCallState) -> None:
        wait_s = round(state.upcoming_sleep, 1)
        log.info(event, **fields, attempt=state.attempt_number, wait_s=wait_s)

    return before_sleep
