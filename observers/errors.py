"""Errors of observers: what loading and calling them raises, and what they may raise."""

from __future__ import annotations


class PluginLoadError(Exception):
    """`--observer` names something that cannot be loaded or is not an observer."""

    def __init__(self, spec: str, problem: str) -> None:
        super().__init__(f"--observer {spec!r}: {problem}")
        self.spec = spec
        self.problem = problem


class ReplayRequired(Exception):
    """Raised by an observer that lost batches it had already accepted (a buffered write failed):
    the worker must not retry the current batch nor skip it, but close the lease so that reading
    starts again from the last checkpoint. Never dead-lettered."""


class Unavailable(Exception):
    """Raised by an observer whose destination cannot be reached now (the Spark observer's
    Connect server lost): the batch was not accepted. The host offers it again after
    `retry_after_s` seconds, without backing off further and without counting it as the
    observer failing, for as long as the lease is its own; a stop or a lost lease ends the
    waiting, as for any retry. What the observer accepted before is still its to write."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BadEventError(ValueError):
    """A record cannot become a change log row (named by its position)."""
