"""Spark's class archive: where it lives, when the JVM options name it, and how its
build succeeds, fails and reports, without running Spark (the real build runs in every
``make test`` and ``make demo``, before the Spark tests that use it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from broker.testing import class_archive
from broker.testing.jvm import (
    QUICK_JVM_OPTIONS,
    cache_dir,
    java_executable,
    spark_archive_path,
    spark_java_options,
    spark_java_options_line,
)


def fake_java_home(root: Path, libjvm_bytes: bytes = b"jvm") -> Path:
    """A JDK layout with an executable ``bin/java`` and a ``lib/server/libjvm.so``."""
    java = root / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    libjvm = root / "lib" / "server" / "libjvm.so"
    libjvm.parent.mkdir(parents=True)
    libjvm.write_bytes(libjvm_bytes)
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = fake_java_home(tmp_path / "jdk")
    return {"JAVA_HOME": str(home), "PATH": "", "LOGFERRY_JVM_CACHE": str(tmp_path / "cache")}


def test_the_cache_is_the_variable_else_xdg_else_home(tmp_path: Path) -> None:
    assert cache_dir({"LOGFERRY_JVM_CACHE": str(tmp_path / "c")}) == tmp_path / "c"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "logferry" / "jvm"
    assert cache_dir({}) == Path.home() / ".cache" / "logferry" / "jvm"


def test_java_is_java_home_first_then_path(tmp_path: Path) -> None:
    home = fake_java_home(tmp_path / "jdk")
    assert java_executable({"JAVA_HOME": str(home), "PATH": ""}) == home / "bin" / "java"
    assert java_executable({"JAVA_HOME": str(tmp_path / "none"), "PATH": str(home / "bin")}) == home / "bin" / "java"
    assert java_executable({"PATH": str(tmp_path)}) is None


def test_without_an_archive_the_options_are_the_quick_ones(env: dict[str, str]) -> None:
    assert spark_java_options(env) == QUICK_JVM_OPTIONS


def test_a_built_archive_is_named_in_the_options(env: dict[str, str]) -> None:
    archive = spark_archive_path(env)
    assert archive is not None and archive.parent == Path(env["LOGFERRY_JVM_CACHE"])
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    assert spark_java_options(env) == (*QUICK_JVM_OPTIONS, f"-XX:SharedArchiveFile={archive}")
    assert spark_java_options_line(env).endswith(f" -XX:SharedArchiveFile={archive}")


def test_another_jvm_build_gets_another_archive(env: dict[str, str], tmp_path: Path) -> None:
    other = fake_java_home(tmp_path / "jdk2", libjvm_bytes=b"another build")
    assert spark_archive_path(env) != spark_archive_path({**env, "JAVA_HOME": str(other)})
    (Path(env["JAVA_HOME"]) / "lib" / "server" / "libjvm.so").write_bytes(b"patched in place")
    before = spark_archive_path(env)
    (Path(env["JAVA_HOME"]) / "lib" / "server" / "libjvm.so").write_bytes(b"patched in place, again")
    assert spark_archive_path(env) != before


def test_no_java_means_no_archive(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "LOGFERRY_JVM_CACHE": str(tmp_path / "cache")}
    assert spark_archive_path(env) is None
    assert spark_java_options(env) == QUICK_JVM_OPTIONS


class FakeRun:
    """Stands in for the Spark child: writes the dump file (or not) and exits."""

    def __init__(self, returncode: int, writes: bool, stderr: str = ""):
        self.returncode, self.writes, self.stderr = returncode, writes, stderr
        self.argv: list[str] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.argv = argv
        if self.writes:
            Path(argv[-1]).write_bytes(b"classes")
        return subprocess.CompletedProcess(argv, self.returncode, "", self.stderr)


def test_a_build_renames_the_dump_into_place_and_drops_older_archives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "spark-new.jsa"
    older = tmp_path / "spark-old.jsa"
    older.write_bytes(b"old")
    run = FakeRun(0, writes=True)
    monkeypatch.setattr(class_archive.subprocess, "run", run)
    class_archive.build_spark_archive(target)
    assert run.argv[-2] == "--spark-workload" and Path(run.argv[-1]).parent == tmp_path
    assert target.read_bytes() == b"classes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-new.jsa"]


@pytest.mark.parametrize(
    ("returncode", "writes"), [(1, True), (0, False)], ids=["the job failed", "no archive written"]
)
def test_a_failed_build_leaves_nothing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, returncode: int, writes: bool
) -> None:
    monkeypatch.setattr(class_archive.subprocess, "run", FakeRun(returncode, writes, "Py4JError: boom\n"))
    with pytest.raises(RuntimeError, match=f"exited {returncode} without an archive: Py4JError: boom"):
        class_archive.build_spark_archive(tmp_path / "spark-x.jsa")
    assert list(tmp_path.iterdir()) == []


def test_the_command_builds_once_then_says_up_to_date(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(class_archive.subprocess, "run", FakeRun(0, writes=True))
    assert class_archive.main([]) == 0
    assert "class archive: built in" in capsys.readouterr().err
    assert class_archive.main([]) == 0
    assert "class archive: Spark's is up to date" in capsys.readouterr().err


def test_a_failed_build_is_one_warning_and_exit_0(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(class_archive.subprocess, "run", FakeRun(1, writes=False, stderr="no JVM\n"))
    assert class_archive.main([]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("class archive: warning: not built (the Spark job exited 1 without an archive: no JVM)")
    assert spark_java_options(env) == QUICK_JVM_OPTIONS


def test_without_java_there_is_nothing_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "environ", {"PATH": str(tmp_path)})
    assert class_archive.main([]) == 0
    assert "nothing to build" in capsys.readouterr().err
