"""Freshness of ``logferry load --every``: how long after a message is appended its row lands.

One ZooKeeper and one broker on 127.0.0.1; a producer sends ``--rate`` messages/s (200 B,
timestamp = the send time, over 4 partitions) for ``--seconds``; meanwhile a real
``python -m hadoop_loader load --every <interval>`` process lands them into an Iceberg
table on a real HDFS (``--on hdfs``, Hadoop's NameNode and DataNode started here) or on
``file://``. Then, per row: freshness = the commit time of the snapshot that added it
(its summary's ``logferry.ranges`` hold the row's offset) minus the message's
timestamp (the broker appends within milliseconds of the send: ``linger_ms = 5``). The
messages sent before the loop's first commit are left out (they waited for the JVM's
start, a cost paid once per process, not per interval); the figures are for the steady
state. The target (issue 38): p99 at most twice the interval.

    .venv/bin/python benchmarks/loader_freshness.py --interval 30 --seconds 180

Prints the percentiles, the runs and their durations, and the load average before and
after (the machine is shared: figures depend on what else runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer  # noqa: E402

TOPIC = "fresh"
PARTITIONS = 4
REPO = Path(__file__).resolve().parents[1]
RUN_LINE = re.compile(r"^(\S+Z) run (\d+) committed: ([\d,]+) rows.* in ([\d.]+) s$", re.MULTILINE)


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def produce(zk: str, rate: int, seconds: float, stop: threading.Event) -> int:
    """``rate`` messages/s in 10 sends a second, each timestamped now; returns the count."""
    sent = 0
    with Producer(zk=zk, linger_ms=5) as producer:
        started = time.monotonic()
        step = max(rate // 10, 1)
        while time.monotonic() - started < seconds and not stop.is_set():
            now_ms = int(time.time() * 1000)
            values = [(b"%012d fresh line" % (sent + i)).ljust(200, b".") for i in range(step)]
            producer.send(TOPIC, values, partition=(sent // step) % PARTITIONS, timestamp=now_ms)
            sent += step
            pause = started + sent / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        producer.flush(timeout=120)
        if producer.metrics().get("messages_failed", 0):
            raise SystemExit("the producer failed to deliver messages")
    return sent


def loader_toml(path: Path, zk: str, warehouse: str, jar: str) -> Path:
    path.write_text(f"""
[source]
zk = "{zk}"
topics = ["{TOPIC}"]
[output]
uri = "{warehouse}"
format = "iceberg"
[spark]
master = "local[2]"
driver_memory = "768m"
[spark.conf]
"spark.ui.enabled" = "false"
"spark.ui.showConsoleProgress" = "false"
"spark.sql.shuffle.partitions" = "2"
"spark.jars" = "{jar}"
""")
    return path


def committed_rows(log: Path) -> int:
    return sum(int(m[2].replace(",", "")) for m in RUN_LINE.findall(log.read_text(errors="replace")))


def freshness(warehouse: str, jar: str) -> tuple[list[float], int]:
    """(the freshness in ms of every row sent after the first commit, the number of
    snapshots), read with a Spark session of this process."""
    from pyspark.sql import SparkSession

    from hadoop_loader.iceberg import EXTENSIONS, RANGES, catalog_conf, table_name

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("freshness-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", jar)
        .config("spark.sql.extensions", EXTENSIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for key, value in catalog_conf(warehouse).items():
            spark.conf.set(key, value)
        name = table_name(warehouse, "logferry", TOPIC)
        snaps = spark.sql(f"SELECT committed_at, summary FROM {name}.snapshots ORDER BY committed_at").collect()
        ranges = []  # (partition, start, end, commit ms)
        for s in snaps:
            commit_ms = int(s["committed_at"].timestamp() * 1000)
            for p, start, end in json.loads(s["summary"].get(RANGES, "[]")):
                ranges.append((p, start, end, commit_ms))
        first_commit = min(r[3] for r in ranges)
        rows = spark.sql(f"SELECT partition, offset, timestamp FROM {name}").collect()
    finally:
        spark.stop()
    ages = []
    for r in rows:
        ts = int(r["timestamp"].timestamp() * 1000)
        commit = next(c for p, lo, hi, c in ranges if p == r["partition"] and lo <= r["offset"] < hi)
        if ts > first_commit:  # steady state: sent after the loop's first commit
            ages.append(float(commit - ts))
    return ages, len(snaps)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=30.0, help="the loop's --every, seconds")
    parser.add_argument("--seconds", type=float, default=180.0, help="how long messages are sent")
    parser.add_argument("--rate", type=int, default=200, help="messages per second")
    parser.add_argument("--on", choices=["hdfs", "file"], default="hdfs", help="where the warehouse is")
    args = parser.parse_args()
    from broker.testing.jars import JarSet
    from hadoop_loader.iceberg import ICEBERG_VERSION, RUNTIME_JAR

    jars = JarSet("apache-iceberg", "Apache Iceberg's Spark runtime", ICEBERG_VERSION)
    if not jars.resolved():
        raise SystemExit(jars.missing_reason())
    jar = str(jars.jar_dir() / RUNTIME_JAR)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(f"load average at the start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="logferry-bench-fresh-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        cluster = stack.enter_context(LocalCluster(workdir, brokers=1, broker={"num_partitions": PARTITIONS}))
        zk = cluster.zk_connect
        with Admin(zk=zk) as admin:
            admin.create_topic(TOPIC, PARTITIONS)
        warehouse = (workdir / "wh").as_uri()
        if args.on == "hdfs":
            from broker.testing.hdfs import LocalHdfs
            from broker.testing.localrun import free_port

            hdfs = LocalHdfs(workdir / "hdfs", free_port(), free_port())
            hdfs.start(180)
            stack.callback(hdfs.stop)
            warehouse = f"{hdfs.uri}/bench/wh"
        config = loader_toml(workdir / "loader.toml", zk, warehouse, jar)
        log = workdir / "loop.out"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with log.open("wb") as sink:
            loop = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hadoop_loader",
                    "load",
                    "--config",
                    str(config),
                    "--every",
                    f"{args.interval}s",
                ],
                cwd=REPO,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.callback(lambda: os.killpg(loop.pid, signal.SIGKILL) if loop.poll() is None else None)
        stop = threading.Event()
        sent = produce(zk, args.rate, args.seconds, stop)
        deadline = time.monotonic() + 3 * args.interval + 120
        while committed_rows(log) < sent and loop.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        loop.send_signal(signal.SIGTERM)
        code = loop.wait(120)
        text = log.read_text(errors="replace")
        runs = RUN_LINE.findall(text)
        if code != 0 or committed_rows(log) != sent:
            print(text[-4000:])
            raise SystemExit(f"the loop exited {code} having landed {committed_rows(log)} of {sent} rows")
        ages, snapshots = freshness(warehouse, jar)
    durations = [float(r[3]) for r in runs]
    print(
        f"sent {sent:,} messages at {args.rate}/s for {args.seconds:.0f} s; the loop (--every {args.interval:g}s, "
        f"Iceberg on {args.on}) landed them in {len(runs)} runs ({snapshots} snapshots), each once"
    )
    print(
        f"run duration: median {statistics.median(durations):.1f} s, first {durations[0]:.1f} s "
        f"(table creation), max {max(durations):.1f} s"
    )
    print(
        f"freshness (row committed - message sent), {len(ages):,} rows after the first commit: "
        f"p50 {percentile(ages, 0.5) / 1000:.1f} s, p99 {percentile(ages, 0.99) / 1000:.1f} s, "
        f"max {max(ages) / 1000:.1f} s; p99 / interval = {percentile(ages, 0.99) / 1000 / args.interval:.2f} "
        "(target at most 2)"
    )
    print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
