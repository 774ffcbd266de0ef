"""The kinds of process the suite's CPU is summed by (tests/support/cpu_by_process.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.cpu_by_process import _share, kind_of, sample


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("/usr/bin/java -Xmx256m -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server", "ZooKeeper JVM"),
        (
            "/usr/lib/jvm/java-17/bin/java -cp .../pyspark/jars/* org.apache.spark.deploy.SparkSubmit",
            "Spark driver JVM",
        ),
        ("java -cp .../pyspark/jars/* org.apache.spark.deploy.master.Master", "Spark standalone daemon JVM"),
        ("java ... org.apache.spark.executor.CoarseGrainedExecutorBackend", "Spark executor JVM"),
        (".venv/bin/python -m pyspark.daemon pyspark.sql.worker.create_data_source", "Spark Python worker"),
        (".venv/bin/python -m broker broker --config b.toml", "broker"),
        (".venv/bin/python -m broker mirror --config m.toml", "mirror"),
        ("python -m broker broker (forked)", "broker"),  # a fork server's child, named by its comm
        ("python -m broker agent (forked)", "agent"),
        (".venv/bin/python -u -m broker.testing.prefork /tmp/p/prefork.sock broker.cli.main", "fork server"),
        (".venv/bin/python -m broker topic create t", "other logferry command"),
        (".venv/bin/python -m hadoop_loader load --config l.toml", "loader (own process)"),
        (".venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest worker"),
        ("make test", "other"),
    ],
)
def test_each_process_is_summed_under_its_kind(command: str, kind: str) -> None:
    assert kind_of(command) == kind


def test_the_busy_share_is_of_all_cpus_between_two_readings() -> None:
    assert _share((100, 1000), (250, 1200)) == 75.0
    assert _share((100, 1000), (100, 1000)) == 0.0


def test_with_a_family_only_the_command_and_its_descendants_are_counted() -> None:
    # this process is the family's root; its parent (another job, as far as the
    # family goes) is left out
    seen: dict[tuple[int, int], list] = {}
    family = {os.getpid()}
    sample(seen, set(), family)
    assert os.getpid() in {pid for pid, _ in seen}
    assert os.getppid() not in {pid for pid, _ in seen}
    everything: dict[tuple[int, int], list] = {}
    sample(everything, set())
    assert os.getppid() in {pid for pid, _ in everything}
