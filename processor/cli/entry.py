"""The `cfp` command's entry point, kept free of heavy imports.

Importing the CLI (PySpark, pyarrow, the Azure SDKs) takes seconds. A SIGTERM in that window
would kill the process with the signal's default action (exit status -15 to its parent) although
nothing was started yet; an orchestrator that scales down right after scaling up does exactly
that. Until a command installs its own graceful handler, SIGTERM ends the process with status 0.
"""

from __future__ import annotations

import signal
from types import FrameType


def _stopped_while_starting(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main() -> None:
    signal.signal(signal.SIGTERM, _stopped_while_starting)
    from processor.cli.main import main as cli  # noqa: PLC0415 - only once the handler is set

    cli()
