"""``logferry load --every``: one process lands what arrives, run after run, exactly once.

A real ``python -m hadoop_loader load --every 2s`` process (its own Spark JVM, Iceberg
on ``file://``), a real broker: messages sent before it starts and while it runs land
as rows, each once, per partition in order (read back with Spark SQL); each run prints
one line; SIGTERM ends the process with exit 0 after the run in flight, and nothing of
it stays behind. The loop's decisions without a JVM are in test_continuous_units.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from hadoop_loader.iceberg import catalog_conf
from tests.loader.conftest import REPO, iceberg_jar, iceberg_spark_conf, loader_command, produce, write_loader_toml
from tests.loader.test_iceberg_integration import assert_table_exactly
from tests.loader.test_load_integration import merge
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`"),
]

COMMITTED = re.compile(r"^\S+ run \d+ committed: ([\d,]+) rows", re.MULTILINE)


def landed(out: Path) -> int:
    """Rows the loop's runs reported committed so far."""
    return sum(int(n.replace(",", "")) for n in COMMITTED.findall(out.read_text(errors="replace")))


def test_a_loop_lands_what_arrives_and_stops_on_sigterm(spark, broker_cluster, tmp_path: Path) -> None:
    zk = broker_cluster(1).zk_connect
    sent: dict = {}
    merge(sent, {"loop": produce(zk, "loop", 2, 600, hours=1)})
    config = write_loader_toml(
        tmp_path / "loader.toml",
        zk,
        tmp_path / "wh",
        ["loop"],
        output='format = "iceberg"',
        spark_conf=iceberg_spark_conf(),
    )
    argv, env = loader_command(config)
    out = tmp_path / "loop.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [*argv, "--every", "2s"], cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(lambda: landed(out) >= 600 or proc.poll() is not None, 150, "the loop's first run to land 600 rows")
        assert proc.poll() is None, out.read_text()[-4000:]
        merge(sent, {"loop": produce(zk, "loop", 2, 400, start=600, hours=1)})
        wait_until(lambda: landed(out) >= 1_000 or proc.poll() is not None, 60, "later runs to land 400 more")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the loop, its JVM and Python workers
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    text = out.read_text(errors="replace")
    assert code == 0, text[-4000:]
    assert landed(out) == 1_000, text[-4000:]
    runs = [line for line in text.splitlines() if re.match(r"^\S+Z (run \d+ committed|nothing new|run failed)", line)]
    assert len(runs) >= 2 and not any("run failed" in line for line in runs), text[-4000:]
    warehouse = (tmp_path / "wh").as_uri()
    for key, value in catalog_conf(warehouse).items():  # the loop ran in its own process
        spark.conf.set(key, value)
    assert_table_exactly(spark, warehouse, sent)
