"""`cfp run`'s options to a host configuration: defaults, derived values, and every refusal."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
from click.core import ParameterSource
from click.testing import CliRunner

from leases import HostId, LoadRule
from observers import ObserverFactory, PluginHost, PluginLoadError
from observers.formats import Format
from processor.cli.main import command_named, main
from processor.cli.run.host_settings import ConfigError, RunOptions, host_config
from processor.cli.run.run_options import keep_secrets_out, run_options
from processor.connection import DEFAULT_CONNECTION_STRING, storage_access
from processor.host.assembly import dead_letter_dir
from processor.host.host_config import HostConfig, OnObserverError
from processor.plugins import load_observer_factory
from processor.redact import redact

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
HOST = PluginHost(
    "h",
    "p",
    DEFAULT_CONNECTION_STRING,
    lambda: NOW,
    lambda c: storage_access(c or DEFAULT_CONNECTION_STRING),
)


def parsed(*argv: str, env: dict[str, str] | None = None) -> RunOptions:
    """The options click parses from `cfp run ARGV` (the command itself never runs)."""
    seen: list[RunOptions] = []
    command = command_named("run")
    runner = CliRunner()
    original = command.callback
    given = {ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT}

    def callback(**params: object) -> None:
        ctx = click.get_current_context()
        seen.append(run_options(params, lambda name: ctx.get_parameter_source(name) in given))

    command.callback = callback
    try:
        result = runner.invoke(main, ["run", *argv], env={"CFP_OBSERVER": None, **(env or {})})
    finally:
        command.callback = original
    assert result.exit_code == 0, result.output
    return seen[0]


def config(*argv: str) -> HostConfig:
    return host_config(
        parsed(*argv), conn=DEFAULT_CONNECTION_STRING, now=NOW, default_host=HostId("me-1")
    )


def test_the_defaults_make_a_host() -> None:
    c = config()
    assert c.placement.host_name == "me-1" and c.placement.processor_name == "default"
    assert (
        c.placement.lease_table == "cfpleases"
        and c.placement.lease_connection_string == DEFAULT_CONNECTION_STRING
    )
    assert c.delivery.observer.spec == "log" and c.delivery.observer.fmt is Format.NATIVE
    assert (
        c.reading.batch_events == 250
        and c.delivery.attempts == 5
        and c.new_leases.scan_partitions == 8
    )
    assert c.timings.expiry_s == 30 and c.timings.renew_every_s == 10
    assert (
        c.new_leases.start_time is None and c.reading.is_ordered and not c.new_leases.initial_scan
    )
    assert c.by_load is None  # balancing by count


def test_flags_reach_the_config() -> None:
    c = config(
        "--host-name", "h7", "--observer", "jsonl:/tmp/x", "--format", "debezium",
        "--lease-expiration", "9", "--start-from-now", "--unordered", "--max-batch-events", "17",
    )  # fmt: skip
    assert c.placement.host_name == "h7" and c.delivery.observer.fmt is Format.DEBEZIUM
    assert c.timings.expiry_s == 9 and c.timings.renew_every_s == 3
    assert (
        c.new_leases.start_time == NOW and not c.reading.is_ordered and c.reading.batch_events == 17
    )


def test_balance_by_load_takes_its_tolerance() -> None:
    assert config("--balance-by", "load").by_load == LoadRule(0.25)
    assert config("--balance-by", "load", "--load-tolerance", "0.1").by_load == LoadRule(0.1)
    assert config("--load-tolerance", "0.1").by_load is None


def loaded(c: HostConfig) -> ObserverFactory:
    return load_observer_factory(c.delivery.observer, host=HOST)


def test_the_spark_flags_are_the_spark_observers_options(tmp_path: Path) -> None:
    """Given flags (not defaults) become its options; a local output gets a dead-letter
    folder; another observer ignores them."""
    argv = ("--output", str(tmp_path), "--spark-max-rows", "7", "--no-history")
    c = config("--observer", "spark", *argv, "--on-observer-error", "dead-letter")
    assert c.delivery.observer.options == (
        f"output={tmp_path}",
        "history=false",
        "spark_max_rows=7",
    )
    assert c.delivery.on_observer_error is OnObserverError.DEAD_LETTER
    factory = loaded(c)
    assert dead_letter_dir(c.delivery, factory) == str(tmp_path.resolve() / "dead-letter")
    assert config("--observer", "log", *argv).delivery.observer.options == ()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--on-observer-error", "dead-letter"], "needs --dead-letter-dir"),
        (["--observer", "spark"], "--output"),
        (["--observer", "spark", "--output", "s3://bucket/x"], "s3://"),
    ],
)
def test_observers_that_cannot_be_made_say_which_flags(argv: list[str], problem: str) -> None:
    c = config(*argv)
    with pytest.raises(PluginLoadError, match=problem):
        dead_letter_dir(c.delivery, loaded(c))


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--start-time", "2026-01-01T00:00:00Z", "--start-from-now"], "exclude each other"),
        (["--initial-scan", "--start-from-now"], "--initial-scan sets where the feed starts"),
        (["--lease-expiration", "3", "--renew-interval", "2"], "renew"),
    ],
)
def test_options_that_make_no_host_say_which_flags(argv: list[str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        config(*argv)


def test_the_config_builder_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    o = dataclasses.replace(parsed(), lease_connection_string=None)
    monkeypatch.setenv("CFP_CONNECTION_STRING", "AccountName=elsewhere;AccountKey=a2V5")
    c = host_config(o, conn=DEFAULT_CONNECTION_STRING, now=NOW, default_host=HostId("me-1"))
    assert (
        c.placement.connection_string
        == c.placement.lease_connection_string
        == DEFAULT_CONNECTION_STRING
    )


def test_the_filter_options_make_one_canonical_filter_and_variables_take_several() -> None:
    c = config("--container", "raw", "--container", "logs-*", "--event-type", "BlobCreated")
    assert c.reading.change.containers == ("logs-*", "raw") and c.reading.change.event_types == {
        "BlobCreated"
    }
    assert (
        c.reading.identity.text()
        == config(
            "--event-type", "BlobCreated", "--container", "logs-*", "--container", "raw"
        ).reading.identity.text()
    )
    assert config().reading.change.is_empty
    env = {"CFP_CONTAINER": "a b*", "CFP_BLOB_TYPE": "AppendBlob", "CFP_BLOB_PREFIX": "x/"}
    o = parsed(env=env)
    assert o.containers == ("a", "b*") and o.blob_types == ("AppendBlob",) and o.blob_prefix == "x/"


def test_an_end_time_must_come_after_the_start() -> None:
    end = "2026-01-01T02:00:00Z"
    assert config("--end-time", end).reading.end_time == datetime(2026, 1, 1, 2, tzinfo=UTC)
    with pytest.raises(ConfigError, match=r"--end-time .* is not after the start"):
        config("--start-time", "2026-01-01T03:00:00Z", "--end-time", end)
    with pytest.raises(ConfigError, match="not after the start"):
        config("--start-from-now", "--end-time", end)  # now is 2026-11-25
    assert config("--stuck-after", "60").delivery.stuck_after_s == 60


def test_observer_options_and_threads_reach_the_delivery_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = config("--observer", "m:Name", "--observer-option", "rows=5", "--observer-option", "a=b c")
    assert c.delivery.observer.options == ("rows=5", "a=b c") and c.delivery.threads == 16
    monkeypatch.setenv("CFP_OBSERVER_OPTIONS", "rows=7 directory=/tmp/x")
    monkeypatch.setenv("CFP_OBSERVER_THREADS", "3")
    c = config("--observer", "m:Name")
    assert c.delivery.observer.options == ("rows=7", "directory=/tmp/x") and c.delivery.threads == 3


def test_a_connection_string_given_as_an_observer_option_is_kept_out_of_logs() -> None:
    """`--observer-option output-connection-string=...` (the Spark flag's key, dashes or not):
    its key is a secret from the moment `cfp run` reads its options, before the observer loads."""
    key = "bm90LWEtcmVhbC1rZXktb2J2aW91c2x5"
    conn = f"AccountName=elsewhere;AccountKey={key}"
    o = parsed("--observer", "m:Name", "--observer-option", f"output-connection-string={conn}")
    assert key in redact(f"the key {key}")  # not yet a known secret
    keep_secrets_out(o)
    assert key not in redact(f"the key {key}")


def test_hints_flags_make_the_hosts_queue_and_tell_the_spark_observer() -> None:
    c = config("--hints-queue", "blob-events", "--hints-visibility-timeout", "12")
    assert c.hints is not None
    assert (c.hints.name, c.hints.visibility_timeout_s) == ("blob-events", 12)
    assert c.hints.connection_string == DEFAULT_CONNECTION_STRING  # the feed's by default
    assert config().hints is None
    spark = parsed("--observer", "spark", "--output", "/t", "--hints-queue", "q-1",
                   "--hints-confirm-within", "60")  # fmt: skip
    assert {"hints=true", "hints_confirm_within=60.0"} <= set(spark.observer_options)
    with pytest.raises(ConfigError, match="not a queue name"):
        config("--hints-queue", "Not_A_Queue")


def test_the_spark_observer_with_hints_asks_for_no_history() -> None:
    choice = config("--observer", "spark", "--output", "/t", "--hints-queue", "q-1").delivery
    with pytest.raises(PluginLoadError, match="--no-history"):
        load_observer_factory(choice.observer, host=HOST)
    no_history = config(
        "--observer", "spark", "--output", "/t", "--hints-queue", "q-1", "--no-history"
    ).delivery
    factory = load_observer_factory(no_history.observer, host=HOST)
    assert factory.options.hints and factory.options.hints_state_every_s == 2.0  # type: ignore[attr-defined]
