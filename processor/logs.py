"""structlog set-up shared by every command: key-value lines on a terminal, JSON lines
otherwise (`--log-json` decides), always on stderr, always through the secret filter."""

from __future__ import annotations

import logging
import sys

from processor.redact import redact_event


def configure_logging(*, level: str = "INFO", json_lines: bool = False) -> None:
    """Route structlog to stderr (stdout is reserved for data such as `cfp read` events)."""
    import structlog  # noqa: PLC0415 - 0.1 s to import: only for a command that runs

    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    # azure-identity warns with the whole list of credentials it tried on every failed token
    # request (each retry): our error names that failure once, with the endpoint
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,  # tracebacks become text the filter sees
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
