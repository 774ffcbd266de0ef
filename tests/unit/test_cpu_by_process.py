"""The kinds of process the suite's CPU is summed by (tests/support/cpu_by_process.py)."""

from __future__ import annotations

import pytest

from tests.support.cpu_by_process import kind_of


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
        (".venv/bin/python -m broker topic create t", "other logferry command"),
        (".venv/bin/python -m hadoop_loader load --config l.toml", "loader (own process)"),
        (".venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest worker"),
        ("make test", "other"),
    ],
)
def test_each_process_is_summed_under_its_kind(command: str, kind: str) -> None:
    assert kind_of(command) == kind
