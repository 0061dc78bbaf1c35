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


class BadEventError(ValueError):
    """A record cannot become a change log row (named by its position)."""
