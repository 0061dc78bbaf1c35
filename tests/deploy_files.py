"""Reading the files of deploy/ the way Docker, Compose and Kubernetes would, for the tests."""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from processor import connection
from processor.cli.main import command_named
from processor.cli.main import main as cli

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


@dataclass
class Dockerfile:
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)


def dockerfile(target: str = "host") -> Dockerfile:
    """The instructions the tests check of the stage `target` (an image: host or spark), with
    those it inherits from the stages it is built on and line continuations joined; `copies`
    holds what every stage copies from the build context."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    stages: dict[str, Dockerfile] = {}
    copies: list[str] = []
    out = Dockerfile()
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "FROM":
            base, _, name = rest.partition(" AS ")
            parent = stages.get(base.strip(), Dockerfile())
            out = stages[name.strip()] = copy.deepcopy(parent)
        elif word == "COPY" and not rest.startswith("--from="):  # not from another stage
            copies += shlex.split(rest)[:-1]
        elif word == "ENV":
            out.env.update(dict(kv.split("=", 1) for kv in shlex.split(rest)))
        elif word == "ENTRYPOINT":
            out.entrypoint = json.loads(rest)
        elif word == "CMD":
            out.cmd = json.loads(rest)
        elif word == "HEALTHCHECK":
            out.healthcheck = json.loads(rest.split(" CMD ", 1)[1])
    found = stages[target]
    found.copies = copies
    return found


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def k8s() -> dict[str, dict[str, Any]]:
    """Every manifest of deploy/k8s, by kind."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            docs[doc["kind"]] = doc
    return docs


def _commands(group: click.Group) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield name, command
        if isinstance(command, click.Group):
            yield from ((f"{name} {n}", c) for n, c in _commands(command))


def cli_variables(command: str | None = None) -> set[str]:
    """The CFP_* variables cfp reads: those of `command` (all commands if None) and the global
    ones."""
    found = {connection.ENV_VAR}
    found |= {p.envvar for p in cli.params if isinstance(p.envvar, str)}
    for name, c in _commands(cli):
        if command is None or name == command:
            found |= {p.envvar for p in c.params if isinstance(p.envvar, str)}
    return found


def check_cfp_args(argv: list[str]) -> None:
    """Parse `cfp ARGS` as click would (options, types, choices) without running anything."""
    assert argv[0] == "cfp", argv
    name, *rest = argv[1:]
    command = command_named(name)
    with command.make_context(name, list(rest)):
        pass
