"""Every option of every command has its `CFP_*` variable, one variable names one option, and a
variable set is what the command reads."""

from __future__ import annotations

from collections import defaultdict

import click
import pytest

from processor.cli.main import main, with_variables
from processor.cli.reference import _commands


def options() -> list[tuple[str, click.Option]]:
    return [
        (path, p)
        for path, command in _commands(main, "cfp")
        for p in command.params
        if isinstance(p, click.Option)
    ]


def test_every_option_of_every_command_has_a_variable() -> None:
    found = options()
    assert len(found) > 100
    missing = [f"{path} {o.opts[0]}" for path, o in found if not str(o.envvar).startswith("CFP_")]
    assert missing == []


def test_one_variable_names_one_option_everywhere() -> None:
    flags: dict[str, set[str]] = defaultdict(set)
    for _, o in options():
        flags[str(o.envvar)].add(o.opts[0])
    assert {var: f for var, f in flags.items() if len(f) > 1} == {}


def test_a_command_reads_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """`CFP_READ_MAX_EVENTS` is `cfp read --max-events`; the hosts' `CFP_POLL_INTERVAL` is not
    `cfp read --poll-interval`, and a flag wins over its variable."""
    read = main.get_command(click.Context(main), "read")
    assert read is not None
    monkeypatch.setenv("CFP_READ_MAX_EVENTS", "7")
    monkeypatch.setenv("CFP_READ_CONTAINER", "a b")
    monkeypatch.setenv("CFP_POLL_INTERVAL", "9")
    params = read.make_context("read", []).params
    assert (params["max_events"], params["containers"]) == (7, ("a", "b"))
    assert params["poll_interval"] != 9
    assert read.make_context("read", ["--max-events", "3"]).params["max_events"] == 3


def test_variables_follow_the_command_and_the_flag() -> None:
    @click.group("lease")
    def group() -> None: ...

    @group.command("move")
    @click.option("--to", "target")
    @click.option("--lease-table", envvar="CFP_LEASE_TABLE")
    @click.option("--dry-run/--no-dry-run")
    def move(target: str, lease_table: str, dry_run: bool) -> None: ...

    with_variables(group, "lease")
    assert [p.envvar for p in move.params] == [
        "CFP_LEASE_MOVE_TO",
        "CFP_LEASE_TABLE",
        "CFP_LEASE_MOVE_DRY_RUN",
    ]
