"""The unit tests mirror the packages: `tests/unit/<folder>/test_<module>[_<what>].py` tests
`<folder>/<module>.py`, so a module's tests are found where it stands. Only the checks of the
whole repository (layering, sizes, docs, locks, deploy files...) stand at `tests/unit/`. Both
ways: every test file names a module, and every module has a test file of its name or an entry
in `TESTED_ELSEWHERE` naming the tests that cover it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"


def strays(unit: Path, root: Path) -> list[str]:
    """Test files below `unit`'s package folders that name no module of the folder they mirror."""
    found = []
    for test in sorted(unit.rglob("test_*.py")):
        folder = root / test.parent.relative_to(unit)
        if test.parent == unit:
            continue  # a check of the whole repository
        modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
        subject = test.stem.removeprefix("test_")
        if not any(subject == m or subject.startswith(f"{m}_") for m in modules):
            found.append(str(test.relative_to(unit)))
    return found


def test_every_unit_test_file_mirrors_a_module() -> None:
    assert strays(UNIT, ROOT) == []


def test_a_test_file_that_mirrors_nothing_is_found(tmp_path: Path) -> None:
    (tmp_path / "processor" / "host").mkdir(parents=True)
    (tmp_path / "processor" / "host" / "renewer.py").write_text("")
    unit = tmp_path / "tests" / "unit"
    (unit / "processor" / "host").mkdir(parents=True)
    for name in ("test_renewer.py", "test_renewer_timing.py", "test_renewal.py"):
        (unit / "processor" / "host" / name).write_text("")
    assert strays(unit, tmp_path) == ["processor/host/test_renewal.py"]


# Modules without a unit test file of their own name, and the tests that cover them. Most talk to
# a real component a unit test would have to fake: `cfp` as a process (cli), Azurite (the
# emulator, the Azure Table store, the change feed's storage), or Spark (the built-in observer,
# the streaming source). The rest are small types and helpers exercised by the tests of their
# users. A new module goes into a test file of its own name, or into this map with its tests.
TESTED_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "processor/admin/processor_token.py": ("tests/unit/processor/changefeed/test_sdk_token.py",),
    "processor/changefeed/catalog.py": ("tests/unit/processor/host/worker/test_feed_watcher.py", "tests/integration/test_reader_feed.py"),
    "processor/changefeed/errors.py": ("tests/integration/test_reader_errors.py", "tests/unit/processor/changefeed/decoding/test_avro_chunk.py"),
    "processor/changefeed/feed_reader.py": ("tests/integration/test_reader_feed.py", "tests/integration/test_reader_errors.py", "tests/integration/test_resume_property.py"),
    "processor/changefeed/window_fetcher.py": ("tests/unit/processor/changefeed/test_shard_reader_requests.py",),
    "processor/changefeed/windows.py": ("tests/unit/processor/changefeed/decoding/test_columnar.py",),
    "processor/cli/admin/lease_commands.py": ("tests/integration/test_stuck_leases.py", "tests/unit/processor/cli/test_main.py"),
    "processor/cli/admin/pause_commands.py": ("tests/integration/test_operations.py",),
    "processor/cli/admin/processor_group.py": ("tests/integration/test_operations.py", "tests/unit/processor/cli/test_main.py"),
    "processor/cli/admin/status_command.py": ("tests/integration/test_operations.py", "tests/integration/test_endpoints.py"),
    "processor/cli/common.py": ("tests/unit/processor/cli/test_main.py",),
    "processor/cli/emulate_command.py": ("tests/integration/test_emulator.py",),
    "processor/cli/emulate_live.py": ("tests/integration/test_emulator.py",),
    "processor/cli/run/hint_options.py": ("tests/integration/test_hints.py", "tests/integration/test_spark.py"),
    "processor/cli/entry.py": ("tests/unit/processor/cli/test_main.py",),
    "processor/cli/read/lines.py": ("tests/integration/test_formats.py", "tests/unit/processor/cli/test_main.py"),
    "processor/cli/read/read_command.py": ("tests/unit/processor/cli/test_main.py", "tests/integration/test_reader_feed.py"),
    "processor/cli/read/read_job.py": ("tests/unit/processor/cli/test_main.py", "tests/integration/test_reader_feed.py"),
    "processor/cli/reference.py": ("tests/unit/processor/cli/test_main_variables.py", "tests/unit/test_docs.py"),
    "processor/cli/run/host_settings.py": ("tests/unit/processor/cli/run/test_run_options.py",),
    "processor/cli/run/run_command.py": ("tests/unit/processor/cli/test_main.py", "tests/integration/test_hosts.py"),
    "processor/cli/run/serve.py": ("tests/integration/test_endpoints.py",),
    "processor/cli/spark/spark_connect_command.py": ("tests/integration/test_spark.py",),
    "processor/cli/spark/table_commands.py": ("tests/unit/processor/admin/test_verify.py", "tests/integration/test_spark.py"),
    "processor/clock.py": ("tests/unit/processor/host/health/test_presence.py",),
    "processor/connection.py": ("tests/unit/processor/test_redact.py", "tests/integration/test_endpoints.py"),
    "processor/emulator/account_blobs.py": ("tests/integration/test_emulator.py", "tests/integration/test_initial_scan.py"),
    "processor/emulator/avro_encoding.py": ("tests/integration/test_reader_feed.py", "tests/unit/processor/changefeed/decoding/test_columnar.py"),
    "processor/emulator/emulator.py": ("tests/integration/test_emulator.py",),
    "processor/emulator/feed_writer.py": ("tests/integration/test_emulator.py", "tests/integration/test_reader_feed.py"),
    "processor/emulator/grid_events.py": ("tests/unit/processor/hints/test_messages.py", "tests/integration/test_emulator.py"),
    "processor/emulator/live_writer.py": ("tests/integration/test_emulator.py",),
    "processor/emulator/records.py": ("tests/integration/test_emulator.py",),
    "processor/emulator/schemas.py": ("tests/integration/test_emulator.py", "tests/unit/processor/changefeed/decoding/test_avro_chunk.py"),
    "processor/emulator/service.py": ("tests/integration/test_emulator.py",),
    "processor/emulator/workload.py": ("tests/integration/test_emulator.py",),
    "processor/host/running/hint_runner.py": ("tests/integration/test_hints.py",),
    "processor/host/assembly.py": ("tests/unit/processor/host/test_host_start.py", "tests/unit/processor/host/test_host_in_process.py"),
    "processor/host/balancing/lease_creator.py": ("tests/unit/processor/host/balancing/test_balancer.py",),
    "processor/host/balancing/table_listing.py": ("tests/unit/processor/host/balancing/test_balancer.py",),
    "processor/host/health/lag_sampling.py": ("tests/integration/test_endpoints.py",),
    "processor/host/health/probe.py": ("tests/unit/test_deploy.py",),
    "processor/host/leasing/renewer.py": ("tests/unit/processor/host/leasing/test_read_rate.py", "tests/integration/test_hosts.py"),
    "processor/host/worker/dead_letter_folder.py": ("tests/unit/processor/host/worker/test_delivery.py", "tests/unit/processor/host/worker/test_worker.py"),
    "processor/host/worker/gap_step.py": ("tests/integration/test_stuck_leases.py",),
    "processor/host/worker/worker_env.py": ("tests/unit/processor/host/worker/test_worker.py",),
    "processor/logs.py": ("tests/unit/processor/test_redact.py",),
    "processor/reading/backlog.py": ("tests/integration/test_operations.py", "tests/integration/test_endpoints.py"),
    "processor/reading/lease_reader.py": ("tests/integration/test_reader_feed.py", "tests/unit/processor/host/worker/test_worker.py"),
    "processor/reading/retention_gaps.py": ("tests/unit/processor/admin/test_lease_moves.py", "tests/integration/test_stuck_leases.py"),
    "processor/runtime.py": ("tests/integration/test_imports.py",),
    "processor/streaming/autoload/pyspark_blobchangefeed.py": ("tests/integration/test_spark_source.py",),
    "processor/streaming/block_index.py": ("tests/integration/test_spark_source.py",),
    "processor/streaming/range_reader.py": ("tests/integration/test_spark_source.py",),
    "processor/streaming/registration.py": ("tests/integration/test_spark_source.py",),
    "processor/streaming/source.py": ("tests/integration/test_spark_source.py", "tests/unit/processor/streaming/test_options.py"),
    "leases/errors.py": ("tests/unit/leases/store/test_table_lease_store_errors.py",),
    "leases/reserved_rows.py": ("tests/unit/leases/policy/test_watching.py", "tests/integration/test_lease_store.py"),
    "leases/record.py": ("tests/unit/leases/policy/test_balancing.py", "tests/integration/test_lease_store.py"),
    "leases/store/memory_lease_store.py": ("tests/unit/processor/host/worker/test_checkpointer.py", "tests/unit/processor/host/leasing/test_held_lease.py"),
    "leases/store/table_calls.py": ("tests/unit/leases/store/test_table_lease_store_errors.py", "tests/integration/test_lease_store.py"),
    "leases/store/table_lease_rows.py": ("tests/unit/leases/store/test_table_lease_store_errors.py", "tests/integration/test_lease_store.py"),
    "leases/store/table_processor_rows.py": ("tests/integration/test_lease_store.py",),
    "leases/store/table_rows.py": ("tests/integration/test_lease_store.py", "tests/unit/test_docs.py"),
    "leases/store/table_settings.py": ("tests/unit/leases/store/test_table_lease_store_errors.py",),
    "observers/builtin/log.py": ("tests/unit/processor/plugins/test_observer_loading.py",),
    "observers/builtin/spark/changelog/change_log.py": ("tests/integration/test_fenced_change_log.py", "tests/unit/observers/builtin/spark/changelog/test_fence_model.py"),
    "observers/builtin/spark/changelog/delta_appends.py": ("tests/integration/test_delta_tables.py",),
    "observers/builtin/spark/changelog/made_up_records.py": ("tests/unit/observers/test_formats.py",),
    "observers/builtin/spark/changelog/sink_leases.py": ("tests/unit/observers/builtin/spark/changelog/test_sink.py", "tests/unit/observers/builtin/spark/changelog/test_sink_outage.py"),
    "observers/builtin/spark/changelog/sink_stats.py": ("tests/unit/observers/builtin/spark/changelog/test_sink.py",),
    "observers/builtin/spark/changelog/warm_up.py": ("tests/unit/observers/builtin/spark/changelog/test_sink.py", "tests/integration/test_spark.py"),
    "observers/builtin/spark/commits.py": ("tests/unit/observers/builtin/spark/test_sql.py",),
    "observers/builtin/spark/faults.py": ("tests/unit/processor/test_faults.py",),
    "observers/builtin/spark/observer.py": ("tests/unit/observers/builtin/spark/changelog/test_sink.py", "tests/integration/test_spark.py"),
    "observers/builtin/spark/session/container.py": ("tests/unit/observers/builtin/spark/session/test_output.py", "tests/integration/test_delta_tables.py"),
    "observers/builtin/spark/session/jars.py": ("tests/unit/test_deploy.py",),
    "observers/builtin/spark/session/session.py": ("tests/integration/test_delta_tables.py", "tests/integration/test_spark_exit.py"),
    "observers/builtin/spark/settings.py": ("tests/unit/processor/plugins/test_observer_loading.py",),
    "observers/builtin/spark/state/history.py": ("tests/integration/test_delta_tables.py",),
    "observers/builtin/spark/state/history_run.py": ("tests/integration/test_delta_tables.py",),
    "observers/builtin/spark/state/added_rows.py": ("tests/integration/test_delta_tables.py",),
    "observers/builtin/spark/state/state_job.py": ("tests/integration/test_delta_tables.py", "tests/unit/observers/builtin/spark/test_sql.py"),
    "observers/builtin/spark/state/state_table.py": ("tests/integration/test_delta_tables.py", "tests/unit/observers/builtin/spark/test_sql.py"),
    "observers/builtin/spark/threads.py": ("tests/unit/observers/builtin/spark/changelog/test_sink.py", "tests/unit/observers/builtin/spark/session/test_link.py"),
    "observers/builtin/spark/tables.py": ("tests/integration/test_delta_tables.py", "tests/unit/observers/builtin/spark/session/test_output.py"),
    "observers/builtin/spark/waits.py": ("tests/integration/test_spark.py",),
    "observers/errors.py": ("tests/unit/observers/test_changes.py", "tests/unit/processor/plugins/test_observer_loading.py"),
    "observers/options.py": ("tests/unit/processor/plugins/test_observer_loading.py",),
}  # fmt: skip
PACKAGES = ("processor", "leases", "observers")


def mirrored(module: Path, unit: Path) -> bool:
    """Whether a test file beside where `module` is mirrored names it (`test_<module>[_what]`, or
    one part of `test_<a>_and_<b>`)."""
    for test in (unit / module.parent).glob("test_*.py"):
        parts = test.stem.removeprefix("test_").split("_and_")
        if any(p == module.stem or p.startswith(f"{module.stem}_") for p in parts):
            return True
    return False


def unmapped(root: Path, unit: Path, elsewhere: dict[str, tuple[str, ...]]) -> list[str]:
    """Modules with neither a test file of their own name nor an entry in `elsewhere`."""
    return [
        str(path.relative_to(root))
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and str(path.relative_to(root)) not in elsewhere
        and not mirrored(path.relative_to(root), unit)
    ]


def test_every_module_has_tests_where_they_are_looked_for() -> None:
    assert unmapped(ROOT, UNIT, TESTED_ELSEWHERE) == []


def test_the_map_names_modules_without_a_test_file_and_tests_that_exist() -> None:
    stale = [m for m in TESTED_ELSEWHERE if mirrored(Path(m), UNIT) or not (ROOT / m).exists()]
    missing = [t for tests in TESTED_ELSEWHERE.values() for t in tests if not (ROOT / t).exists()]
    assert (stale, missing) == ([], [])


def test_a_module_without_tests_is_found(tmp_path: Path) -> None:
    for name in ("renewer", "taking", "lag"):
        (tmp_path / "processor" / "host").mkdir(parents=True, exist_ok=True)
        (tmp_path / "processor" / "host" / f"{name}.py").write_text("")
    unit = tmp_path / "tests" / "unit"
    (unit / "processor" / "host").mkdir(parents=True)
    (unit / "processor" / "host" / "test_renewer_and_lag.py").write_text("")
    assert unmapped(tmp_path, unit, {}) == ["processor/host/taking.py"]
    assert unmapped(tmp_path, unit, {"processor/host/taking.py": ()}) == []
