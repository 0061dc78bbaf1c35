from pathlib import Path

from observers.builtin.spark.class_archive_build import unable
from observers.builtin.spark.session.class_archive import java_binary


def test_a_jdk_that_cannot_archive_is_named_with_its_own_words(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text(
        "#!/bin/sh\necho 'Error occurred during initialization of VM' >&2\n"
        "echo 'DynamicDumpSharedSpaces is unsupported when base CDS archive is not loaded' >&2\n"
        "exit 1\n"
    )
    java.chmod(0o755)
    why = unable(str(java), tmp_path)
    assert why is not None and "base CDS archive is not loaded" in why
    assert "did not run" in (unable(str(tmp_path / "nowhere" / "java"), tmp_path) or "")
    assert list(tmp_path.iterdir()) == [java]  # the probe's archive is not left behind


def test_this_machines_jdk_can_archive(tmp_path: Path) -> None:
    assert unable(java_binary(), tmp_path) is None
    assert list(tmp_path.iterdir()) == []
