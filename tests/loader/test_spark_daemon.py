"""The loader's Spark Python daemon (hadoop_loader.spark_daemon): it imports its workers'
modules once, and only while it can stay single-threaded, since each worker is a fork.

Run as Spark runs it (``python -m <daemon module> <worker module>``, stdin kept open,
the listening port written to stdout); what it holds is read from /proc.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hadoop_loader.spark_daemon", "pyspark.sql.worker.plan_data_source_read"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


def _serving(daemon: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    """(its port, its command line, its memory map) once it listens."""
    assert daemon.stdout is not None
    port = struct.unpack(">i", daemon.stdout.read(4))[0]  # pyspark's write_int, once it listens
    command = Path(f"/proc/{daemon.pid}/cmdline").read_text().replace("\0", " ")
    return port, command, Path(f"/proc/{daemon.pid}/maps").read_text()


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    assert daemon.stdin is not None
    daemon.stdin.close()  # pyspark's daemon ends at EOF on stdin
    try:
        daemon.wait(30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait(10)
    for pipe in (daemon.stdout, daemon.stderr):
        if pipe is not None:
            pipe.close()


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    return {**env, **extra}


def test_the_daemon_serves_with_the_workers_modules_loaded_and_one_thread():
    daemon = _start(_clean_env())
    try:
        port, command, maps = _serving(daemon)
        assert port > 0
        assert "hadoop_loader.spark_daemon" in command
        assert "pyarrow" in maps and "numpy" in maps  # imported before any fork
        assert len(os.listdir(f"/proc/{daemon.pid}/task")) == 1
    finally:
        _stop(daemon)


def test_a_thread_started_by_an_import_makes_it_the_plain_pyspark_daemon():
    daemon = _start(_clean_env(OPENBLAS_NUM_THREADS="2"))  # numpy then starts a BLAS thread
    try:
        port, command, maps = _serving(daemon)
        assert port > 0
        assert "-m pyspark.daemon pyspark.sql.worker.plan_data_source_read" in command
        assert "pyarrow" not in maps  # a fresh interpreter: nothing imported before a fork
    finally:
        _stop(daemon)
