"""The nightly loader on a real Spark standalone cluster: a Master and two Workers, each
its own JVM started from pyspark's jars with ``spark-class``, the loader submitted with
``spark-submit`` and the project's packages shipped to the executors with ``--py-files``.

It must land exactly once, as in local mode, also when a worker (and the executor it
runs) is SIGKILLed while the job's tasks run: Spark reruns the lost tasks elsewhere and
the loader's commit protocol keeps what a dead task half-wrote out of the output.
"""

from __future__ import annotations

import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from tests.loader.conftest import produce
from tests.loader.test_load_integration import assert_landed_exactly
from tests.support.spark_standalone import StandaloneCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def ship_packages(target: Path) -> Path:
    """A zip of the packages the executors import, as a deployment would ship it."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in ("broker", "hadoop_loader", "agent"):
            for path in (REPO / package).rglob("*.py"):
                archive.write(path, path.relative_to(REPO).as_posix())
    return target


def executor_logs(work: Path, worker: int) -> str:
    """What the executors started by one worker wrote to stderr so far."""
    return "".join(p.read_text(errors="replace") for p in (work / f"worker-{worker}").glob("app-*/*/stderr"))


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(
                f"spark-submit exited ({proc.returncode}) before {what}:\n{log.read_text(errors='replace')[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f}s")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(900)  # four JVMs start; about 90 s on a quiet machine, 260 s loaded
def test_the_loader_lands_exactly_once_on_a_standalone_cluster_that_loses_a_worker(
    broker_cluster, tmp_path: Path
) -> None:
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    sent = {
        "sa-a": produce(zk, "sa-a", 4, 60_000, hours=4, value_bytes=120),
        "sa-b": produce(zk, "sa-b", 2, 20_000, hours=2, value_bytes=120),
    }
    out = tmp_path / "wh"
    config = tmp_path / "loader.toml"
    config.write_text(f"""
[source]
zk = "{zk}"
topics = ["sa-a", "sa-b"]
[output]
uri = "{out.as_uri()}"
[load]
chunk_bytes = 262144
fetch_bytes = 131072
""")  # no [spark] master: the one spark-submit was given is used
    shipped = ship_packages(tmp_path / "logferry-packages.zip")
    work = tmp_path / "spark"
    with StandaloneCluster(work, workers=2) as spark:
        log = tmp_path / "submit.log"
        submit = spark.submit(
            [str(REPO / "hadoop_loader" / "__main__.py"), "load", "--config", str(config)], log, py_files=shipped
        )
        try:
            # both workers' executors run tasks; then one worker dies mid-job
            wait_for(
                lambda: "Running task" in executor_logs(work, 0) and "Running task" in executor_logs(work, 1),
                240,
                "tasks running on both workers",
                submit,
                log,
            )
            spark.workers[1].kill()
            code = submit.wait(420)
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait(10)
        driver = log.read_text(errors="replace")
        assert code == 0, driver[-4000:]
        assert "run 1 committed: 80,000 rows" in driver, driver[-4000:]
        # the job really lost an executor while it ran, and finished on the other worker
        assert "Lost executor" in driver or "Executor lost" in driver or "ExecutorLostFailure" in driver, driver[-4000:]
        assert "Running task" in executor_logs(work, 0)
    assert_landed_exactly(out, sent)
