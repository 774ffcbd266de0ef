"""A Spark driver JVM that cannot start ends the load with one line naming it, not with
pyspark's traceback (seen in a crowded make test: JAVA_GATEWAY_EXITED). Spark's real
launcher is run with a JAVA_HOME that holds no java, in a process of its own (a test
process may hold a SparkSession already, which getOrCreate would return)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
from hadoop_loader.config import SparkConfig
from hadoop_loader.errors import SparkJobError
from hadoop_loader.spark_session import build_session
try:
    build_session(SparkConfig(master="local[1]"))
except SparkJobError as exc:
    print("ERROR", exc)
"""


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_jvm_that_does_not_start_is_one_loader_error() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**os.environ, "JAVA_HOME": str(ROOT / "no-such-jdk"), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("ERROR ")]
    assert "cannot start Spark (master local[1]): [JAVA_GATEWAY_EXITED]" in line, line
    assert "Traceback" not in done.stdout
