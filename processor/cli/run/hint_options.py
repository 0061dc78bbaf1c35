"""`cfp run`'s options for hints (`--hints-queue`): the queue, how it is read, and what the
Spark observer does with them (two of its options, as flags of `cfp run`)."""

from __future__ import annotations

import click

from observers.builtin.spark.settings import (
    DEFAULT_HINTS_CONFIRM_WITHIN_S,
    DEFAULT_HINTS_STATE_EVERY_S,
)
from processor.cli.common import Options
from processor.hints.settings import (
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_VISIBILITY_TIMEOUT_S,
)

HINT_OPTIONS: Options = (
    click.option(
        "--hints-queue",
        envvar="CFP_HINTS_QUEUE",
        help="Read hints from this Storage queue: the Blob Storage events an Event Grid "
        "subscription delivers there, handed to the observer (process_hints) seconds after "
        "their changes, before the feed confirms them. Bad messages go to NAME-poison.",
    ),
    click.option(
        "--hints-connection-string",
        envvar="CFP_HINTS_CONNECTION_STRING",
        help="The hints queue's account (default: the feed's, --connection-string).",
    ),
    click.option(
        "--hints-visibility-timeout",
        envvar="CFP_HINTS_VISIBILITY_TIMEOUT",
        type=click.IntRange(min=1, max=7 * 24 * 3600),
        default=DEFAULT_VISIBILITY_TIMEOUT_S,
        show_default=True,
        help="Seconds a received message stays hidden from the other hosts; one not settled by "
        "then (its host died) comes back.",
    ),
    click.option(
        "--hints-poll-interval",
        envvar="CFP_HINTS_POLL_INTERVAL",
        type=click.FloatRange(min=0.05),
        default=DEFAULT_POLL_INTERVAL_S,
        show_default=True,
        help="Seconds between receives while the queue is empty.",
    ),
    click.option(
        "--hints-max-deliveries",
        envvar="CFP_HINTS_MAX_DELIVERIES",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_DELIVERIES,
        show_default=True,
        help="A hint the observer has not accepted in this many deliveries goes to NAME-poison.",
    ),
    click.option(
        "--hints-confirm-within",
        envvar="CFP_HINTS_CONFIRM_WITHIN",
        type=click.FloatRange(min=1),
        default=DEFAULT_HINTS_CONFIRM_WITHIN_S,
        show_default=True,
        help="--observer spark: seconds within which the feed should confirm a hint; the state "
        "rows of those it has not are counted (cfp_hints_unconfirmed).",
    ),
    click.option(
        "--hints-state-interval",
        envvar="CFP_HINTS_STATE_INTERVAL",
        type=click.FloatRange(min=0.5),
        default=DEFAULT_HINTS_STATE_EVERY_S,
        show_default=True,
        help="--observer spark with hints: seconds between runs of the state job, each taking "
        "the new hints (the change log's rows every --state-interval), so that the state shows "
        "a change within seconds.",
    ),
)
