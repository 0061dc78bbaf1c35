from pathlib import Path

import pytest

from observers.builtin.spark.session.class_archive import (
    JAVA_OPTIONS_KEY,
    QUIET,
    archive_name,
    java_binary,
    with_archive,
)


@pytest.fixture
def jars(tmp_path: Path) -> list[Path]:
    made = []
    for name, size in (("delta-spark_4.2_2.13-4.4.0.jar", 10), ("hadoop-azure-3.4.1.jar", 20)):
        (tmp_path / name).write_bytes(b"x" * size)
        made.append(tmp_path / name)
    return made


def test_the_name_changes_with_what_the_archive_was_made_with(jars: list[Path]) -> None:
    first = archive_name("4.2.0", jars, "/usr/lib/jvm/17/bin/java")
    assert first == archive_name("4.2.0", list(reversed(jars)), "/usr/lib/jvm/17/bin/java")
    assert first.startswith("spark-classes-") and first.endswith(".jsa")
    others = {
        archive_name("4.2.1", jars, "/usr/lib/jvm/17/bin/java"),  # another PySpark
        archive_name("4.2.0", jars, "/usr/lib/jvm/21/bin/java"),  # another JDK
        archive_name("4.2.0", jars[:1], "/usr/lib/jvm/17/bin/java"),  # a jar fewer
    }
    jars[1].write_bytes(b"y" * 21)  # a jar of another build
    others.add(archive_name("4.2.0", jars, "/usr/lib/jvm/17/bin/java"))
    assert first not in others and len(others) == 4


def test_the_archive_goes_first_and_a_users_java_options_win() -> None:
    archive = Path("/venv/share/cfp/spark-classes-1.jsa")
    assert with_archive({"a": "1"}, None) == {"a": "1"}
    alone = with_archive({"a": "1"}, archive)
    assert alone == {"a": "1", JAVA_OPTIONS_KEY: f"-XX:SharedArchiveFile={archive} {QUIET}"}
    theirs = with_archive({JAVA_OPTIONS_KEY: " -Xshare:off "}, archive)
    assert theirs[JAVA_OPTIONS_KEY] == f"-XX:SharedArchiveFile={archive} {QUIET} -Xshare:off"


def test_the_java_spark_runs_is_java_homes_else_the_first_on_path(tmp_path: Path) -> None:
    home, on_path = tmp_path / "jdk", tmp_path / "bin"
    for folder in (home / "bin", on_path):
        folder.mkdir(parents=True)
        (folder / "java").write_text("#!/bin/sh\n")
        (folder / "java").chmod(0o755)
    assert java_binary({"JAVA_HOME": str(home), "PATH": str(on_path)}) == str(home / "bin/java")
    assert java_binary({"PATH": str(on_path)}) == str(on_path / "java")
    assert java_binary({"PATH": str(tmp_path / "nowhere")}) == ""
