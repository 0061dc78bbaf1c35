"""The reference pages of docs/ made from the code: every command's options from the click
definitions (docs/reference/cli.md), every metric from the host's registry
(docs/reference/metrics.md). `python -m processor.cli.reference` writes them (`make docs`);
tests/unit/test_docs.py fails when they are stale."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"

CLI_HEAD = """# Reference: the `cfp` command

Made from the click definitions by `make docs` (do not edit). Every option has a `CFP_*`
variable (a flag wins over its variable): `cfp run`'s and those several commands share are
`CFP_<OPTION>`, the others `CFP_<COMMAND>_<OPTION>` (`cfp read --max-events`:
`CFP_READ_MAX_EVENTS`). Intervals are seconds. What the options do together:
[coordination](../coordination.md), [operations](../operations.md),
[configuration](../configuration.md).
"""

METRICS_HEAD = """# Reference: metrics

Made from the host's Prometheus registry by `make docs` (do not edit). Every host serves them at
`/metrics`. Per-lease series exist only for the leases the host holds now: a lease that moves
leaves no stale series behind; sum them over hosts for the processor (`sum(cfp_lag_bytes)`).
Alerts on them: `deploy/prometheus/alerts.yaml`; a dashboard: `deploy/grafana/`.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            found += _commands(command, path)
        else:
            found.append((path, command))
    return found


def _default(option: click.Option) -> str:
    if option.is_flag and not option.default:
        return ""
    value = option.default
    if value is None or value == () or callable(value) or type(value).__name__ == "Sentinel":
        return ""
    return f"`{value}`"


def cli_reference() -> str:
    from processor.cli.main import main  # noqa: PLC0415 - the whole CLI

    parts = [CLI_HEAD]
    for path, command in _commands(main, "cfp"):
        parts.append(f"\n## `{path}`\n")
        summary = (command.help or "").split("\n\n")[0]
        parts.append(f"\n{' '.join(summary.split())}\n")
        options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        if arguments:
            names = " ".join(a.human_readable_name for a in arguments)
            parts.append(f"\nArguments: `{names}`.\n")
        if options:
            parts.append("\n| option | variable | default | meaning |\n|---|---|---|---|\n")
            for o in options:
                flags = " / ".join(f"`{f}`" for f in [*o.opts, *o.secondary_opts])
                env = o.envvar if isinstance(o.envvar, str) else ""
                parts.append(
                    f"| {flags} | {f'`{env}`' if env else ''} | {_default(o)} | "
                    f"{_cell(o.help or '')} |\n"
                )
    return "".join(parts)


def _metrics() -> list[tuple[str, str, list[str], str]]:
    from leases import LeaseToken  # noqa: PLC0415
    from processor.host.health.host_progress import HostProgress  # noqa: PLC0415

    progress = HostProgress()
    lease = progress.leases.started(LeaseToken("00"), 1, None)  # per-lease series need a lease...
    lease.bytes_left, lease.events, lease.bytes_read = 1000, 1, 100  # ...and its lag known
    registry: Any = progress.registry
    declared: dict[str, list[str]] = {}
    for collector in list(registry._collector_to_names):
        name = getattr(collector, "_name", None)
        if name is not None:
            declared[name] = list(getattr(collector, "_labelnames", ()))
    rows = []
    for family in registry.collect():
        seen = {k for s in family.samples for k in s.labels if k != "le"}
        labels = declared.get(family.name) or sorted(seen)
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        kind = "state set" if family.type == "stateset" else family.type
        rows.append((exposed, kind, labels, family.documentation))
    return sorted(rows)


def metrics_reference() -> str:
    table = "\n| metric | type | labels | meaning |\n|---|---|---|---|\n"
    for name, kind, labels, text in _metrics():
        shown = ", ".join(f"`{x}`" for x in labels)
        table += f"| `{name}` | {kind} | {shown} | {_cell(text)} |\n"
    return METRICS_HEAD + table


PAGES = {CLI_PAGE: cli_reference, METRICS_PAGE: metrics_reference}


def main() -> int:
    """Write the pages; with `--check`, only say which are stale (exit 1)."""
    stale = [p for p, make in PAGES.items() if not p.exists() or p.read_text() != make()]
    if "--check" in sys.argv[1:]:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(PAGES[p]())
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
