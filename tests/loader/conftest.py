"""Loader-only fixtures: one SparkSession for the session, producing test data, reading
landed Parquet back with pyarrow (independently of the loader and of Spark).

Spark runs in local mode with two cores, no UI, small memory and few shuffle partitions
(the machine is shared); Python workers run this interpreter.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.testing.iceberg_jars import runtime_jar
from broker.testing.jvm import spark_java_options_line
from hadoop_loader.config import LoaderConfig, config_from_dict
from hadoop_loader.iceberg import EXTENSIONS
from tests.support.waiting import wait_until

HOUR_MS = 3600 * 1000
BASE_HOUR_MS = 1_709_251_200_000
"""2024-03-01T00:00:00Z: event times of test messages start here."""


def iceberg_jar() -> str | None:
    """The Iceberg runtime jar's path (``make iceberg-jars``), or None when it has not been resolved."""
    jar = runtime_jar()
    return None if jar is None else str(jar)


def iceberg_spark_conf() -> dict[str, str]:
    """Spark settings that put Iceberg's runtime on the classpath (none without it)."""
    jar = iceberg_jar()
    return {"spark.jars": jar, "spark.sql.extensions": EXTENSIONS} if jar else {}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession shared by every loader test (with Iceberg's runtime and SQL
    extensions when ``make iceberg-jars`` has resolved them: a 48 MB jar on the classpath,
    loaded only by the tests that use it)."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("logferry-loader-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", spark_java_options_line())  # C1, serial GC, class archive
    )
    for key, value in iceberg_spark_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def produce(
    zk: str,
    topic: str,
    partitions: int,
    n: int,
    *,
    start: int = 0,
    hours: int = 3,
    value_bytes: int = 40,
    per_send: int = 250,
    create: bool = True,
    batch_bytes: int = 256 * 1024,
) -> dict[int, list[tuple[bytes, int]]]:
    """Send ``n`` messages round-robin over ``partitions`` with event times spread over
    ``hours`` hours from BASE_HOUR_MS; returns partition -> [(value, timestamp)] in order."""
    if create:
        with Admin(zk=zk) as admin:
            if topic not in admin.list_topics():
                admin.create_topic(topic, partitions)
    sent: dict[int, list[tuple[bytes, int]]] = {p: [] for p in range(partitions)}
    with Producer(zk=zk, linger_ms=5, batch_bytes=batch_bytes) as producer:
        i = start
        while i < start + n:
            count = min(per_send, start + n - i)
            p = (i // per_send) % partitions
            ts = BASE_HOUR_MS + (i * hours * HOUR_MS) // max(start + n, 1) % (hours * HOUR_MS)
            values = [(b"%s-%08d-" % (topic.encode(), j)).ljust(value_bytes, b"v") for j in range(i, i + count)]
            producer.send(topic, values, partition=p, timestamp=ts)
            sent[p].extend((v, ts) for v in values)
            i += count
        producer.flush(timeout=120)
        metrics = producer.metrics()
        assert metrics.get("messages_failed", 0) == 0, metrics
    wait_visible(zk, topic)
    return sent


def wait_visible(zk: str, topic: str, quiet: float = 0.2, timeout: float = 30.0, tls: Any = None) -> None:
    """Acks come at append, visibility at flush: wait until the visible ends stop moving
    (the test brokers flush every 20 ms). ``tls``: the client's TLS settings."""
    with SimpleConsumer(zk=zk, tls=tls) as consumer:
        last: list[list[int] | None] = [None]

        def still() -> bool:
            ends = [consumer.offsets(topic, p).end for p in consumer.partitions(topic)]
            unchanged, last[0] = ends == last[0], ends
            return unchanged

        wait_until(still, timeout, f"the visible ends of {topic} to stop moving", interval=quiet)


def loader_config(zk: str, out: Path, topics: list[str], **sections: dict) -> LoaderConfig:
    """A LoaderConfig for tests (small chunks, so plans have several per partition)."""
    data: dict[str, dict] = {
        "source": {"zk": zk, "topics": topics},
        "output": {"uri": out.as_uri()},
        "load": {"chunk_bytes": 1 << 20, "fetch_bytes": 256 * 1024},
        "spark": {"master": "local[2]"},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return config_from_dict(data)


SPARK_TEST_SECTIONS = f"""
[spark]
master = "local[2]"
driver_memory = "512m"
[spark.conf]
"spark.ui.enabled" = "false"
"spark.ui.showConsoleProgress" = "false"
"spark.sql.shuffle.partitions" = "2"
# short-lived test JVMs: C1 only, the serial GC and the class archive (broker.testing.jvm)
"spark.driver.extraJavaOptions" = "{spark_java_options_line()}"
"""
"""The ``[spark]`` sections of a loader TOML for tests that run ``logferry load`` itself."""

REPO = Path(__file__).resolve().parents[2]


def write_loader_toml(
    path: Path,
    zk: str,
    out: Path | str,
    topics: list[str],
    *,
    source: str = "",
    extra: str = "",
    output: str = "",
    spark_conf: dict[str, str] | None = None,
) -> Path:
    """A loader config file for ``python -m hadoop_loader load`` runs in tests: source
    (plus the ``source`` lines), output (plus the ``output`` lines; ``out`` a path or a
    URI), small chunks, then ``extra`` (more TOML sections), then the test Spark setup
    (plus ``spark_conf``)."""
    uri = out.as_uri() if isinstance(out, Path) else out
    conf = "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in (spark_conf or {}).items())
    path.write_text(f"""
[source]
zk = "{zk}"
topics = {json.dumps(topics)}
{source}
[output]
uri = "{uri}"
{output}
[load]
chunk_bytes = 262144
fetch_bytes = 65536
{extra}
{SPARK_TEST_SECTIONS}{conf}""")
    return path


def loader_command(config: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a ``python -m hadoop_loader load`` process (Spark on
    loopback, its Python workers on this interpreter); run it with ``cwd=REPO``."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    return [sys.executable, "-m", "hadoop_loader", "load", "--config", str(config)], env


def read_landed(root: Path):
    """Every published row, read with pyarrow (skips _logferry), hive partitions as strings."""
    import pyarrow as pa

    part = ds.partitioning(pa.schema([("topic", pa.string()), ("dt", pa.string()), ("hr", pa.string())]), flavor="hive")
    files = [str(p) for p in root.rglob("*.parquet") if "_logferry" not in p.parts]
    if not files:
        return None
    return ds.dataset(files, format="parquet", partitioning=part, partition_base_dir=str(root)).to_table()
