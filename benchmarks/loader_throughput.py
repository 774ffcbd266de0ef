"""Loader throughput: rows/s landed into Parquet and into Iceberg vs a plain consumer read, in one run.

One ZooKeeper and one broker process on 127.0.0.1; N messages of 200 bytes (log-line
like text, all distinct) over 4 partitions with event times spread over 24 hours. Then:

* ceiling: one SimpleConsumer in this process reads every partition from the start
  (fetch + CRC + decode, values touched), no Spark;
* landing: ``run_load`` into a fresh output directory with Spark local mode (session
  started beforehand and reported separately), once per ``--files-per-hour`` entry. The
  first landing is the JVM's first job ("cold", as in a nightly run: JIT warm-up and
  Python worker start-up included); later ones are "warm";
* Iceberg: ``run_load`` with ``output.format = "iceberg"`` into a fresh warehouse, on a
  real HDFS (Hadoop's NameNode and DataNode started here, ``--iceberg-on hdfs``, the
  default) or on ``file://``, ``--repeat`` times, next to the same number of warm
  Parquet landings on ``file://``; the medians are printed. Needs ``make iceberg-jars``
  (and ``make hadoop-jars`` for HDFS).

    .venv/bin/python benchmarks/loader_throughput.py --messages 1000000 --repeat 3

Figures depend on the machine and its load; the script prints the load average too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import LocalCluster  # noqa: E402
from broker.client import Admin, Producer, SimpleConsumer  # noqa: E402

TOPIC = "bench-load"
PARTITIONS = 4
HOUR_MS = 3600 * 1000
START_MS = 1_709_251_200_000  # 2024-03-01T00:00Z
LINE = (
    b" INFO web-17 GET /api/v2/items?page=3 200 0.004s user=4411 "
    b"agent=Mozilla/5.0 (X11; Linux x86_64) ref=https://example.org/start "
    b"trace=7f3a9c2e"
)


def value(i: int) -> bytes:
    return (b"%012d" % i + LINE).ljust(200, b".")[:200]


def produce(zk: str, n: int) -> float:
    """Send n messages in lists of 500, event times spread over 24 hours; returns seconds."""
    with Admin(zk=zk) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    t0 = time.perf_counter()
    with Producer(zk=zk, linger_ms=5, buffer_bytes=32 << 20) as producer:
        per = 500
        for i in range(0, n, per):
            ts = START_MS + (i * 24 * HOUR_MS) // n
            producer.send(
                TOPIC, [value(j) for j in range(i, min(i + per, n))], partition=(i // per) % PARTITIONS, timestamp=ts
            )
        producer.flush(timeout=300)
        failed = producer.metrics().get("messages_failed", 0)
    if failed:
        raise SystemExit(f"the producer failed to deliver {failed} messages")
    return time.perf_counter() - t0


def wait_visible(zk: str, quiet: float = 0.5) -> None:
    """Acks come at append; consumers see data once flushed. Wait until the ends settle."""
    with SimpleConsumer(zk=zk) as consumer:
        last = None
        while True:
            ends = [consumer.offsets(TOPIC, p).end for p in consumer.partitions(TOPIC)]
            if ends == last:
                return
            last = ends
            time.sleep(quiet)


def consume_all(zk: str) -> tuple[int, float]:
    """The ceiling: read everything with one SimpleConsumer; returns (rows, seconds)."""
    rows = 0
    t0 = time.perf_counter()
    with SimpleConsumer(zk=zk, max_bytes=8 << 20) as consumer:
        for p in consumer.partitions(TOPIC):
            start, end = consumer.offsets(TOPIC, p)
            pos = start
            while pos < end:
                result = consumer.fetch(TOPIC, p, pos)
                for batch in result.batches:
                    rows += len(batch.values)
                pos = result.next_offset
    return rows, time.perf_counter() - t0


def land(
    spark, zk: str, out: Path | str, files_per_hour: int, fmt: str = "parquet"
) -> tuple[int, float, int, int, dict]:
    """One landing run; returns (rows, seconds, parquet bytes, files)."""
    from hadoop_loader.config import config_from_dict
    from hadoop_loader.job import run_load

    output = {"uri": out.as_uri() if isinstance(out, Path) else out, "format": fmt}
    output["files_per_hour"] = files_per_hour
    config = config_from_dict(
        {
            "source": {"zk": zk, "topics": [TOPIC]},
            "output": output,
            "load": {"chunk_bytes": 32 << 20},
        }
    )
    result = run_load(config, spark=spark)
    stats = result.topics[TOPIC]
    return result.rows, result.seconds, stats.parquet_bytes, stats.files, result.phases


def iceberg_conf(repeat: int) -> dict[str, str]:
    """Iceberg's runtime on the session's classpath (``make iceberg-jars``)."""
    if repeat <= 0:
        return {}
    from broker.testing.jars import JarSet
    from hadoop_loader.iceberg import EXTENSIONS, ICEBERG_VERSION, RUNTIME_JAR

    jars = JarSet("apache-iceberg", "Apache Iceberg's Spark runtime", ICEBERG_VERSION)
    if not jars.resolved():
        raise SystemExit(f"{jars.missing_reason()} (or --repeat 0 for Parquet only)")
    return {"spark.jars": str(jars.jar_dir() / RUNTIME_JAR), "spark.sql.extensions": EXTENSIONS}


def compare_with_iceberg(spark, zk: str, workdir: Path, args: argparse.Namespace, ceiling: float) -> None:
    """``--repeat`` rounds of ``--cases`` (Parquet on file://, Iceberg on HDFS or file://,
    with or without the shuffle by hour), fresh outputs each; prints each run and the
    medians."""
    import contextlib
    import statistics

    from broker.testing.hdfs import LocalHdfs
    from broker.testing.localrun import free_port

    cases = [(fmt, int(per_hour)) for fmt, _, per_hour in (c.partition(":") for c in args.cases.split(","))]
    with contextlib.ExitStack() as stack:
        if args.iceberg_on == "hdfs":
            hdfs = LocalHdfs(workdir / "hdfs", free_port(), free_port())
            t0 = time.perf_counter()
            hdfs.start(180)
            stack.callback(hdfs.stop)
            print(f"HDFS started ({hdfs.uri}) in {time.perf_counter() - t0:.1f} s")
        rates: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
        where = {case: "file://" if case[0] == "parquet" or args.iceberg_on == "file" else "hdfs://" for case in cases}
        for n in range(args.repeat):
            for fmt, per_hour in cases:
                out: Path | str = workdir / f"{fmt}-{per_hour}-{n}"
                if where[fmt, per_hour] == "hdfs://":
                    out = f"{hdfs.uri}/bench/{fmt}-{per_hour}-{n}"
                cpu = _cpu_seconds()
                landed, seconds, size, files, phases = land(spark, zk, out, per_hour, fmt)
                cpu = _cpu_seconds() - cpu
                assert landed == args.messages, landed
                rates[fmt, per_hour].append(landed / seconds)
                print(
                    f"{fmt:<8} files_per_hour={per_hour} on {where[fmt, per_hour]:<8} run {n + 1}: "
                    f"{landed / seconds:>10,.0f} rows/s ({seconds:.2f} s, {files} files, {size / 2**20:.0f} MiB, "
                    f"{cpu / landed * 1e6:.1f} CPU-us/row, {landed / seconds / ceiling:.0%} of ceiling)"
                )
                print("           steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
        for (fmt, per_hour), values in rates.items():
            print(
                f"median   {fmt} files_per_hour={per_hour} on {where[fmt, per_hour]} ({len(values)} runs): "
                f"{statistics.median(values):,.0f} rows/s (min {min(values):,.0f}, max {max(values):,.0f})"
            )


def _cpu_seconds() -> float:
    """CPU seconds of this process and its children so far (Spark's JVM and its Python
    workers are children); children count once they are waited for, so the JVM's own
    CPU is read from /proc while it runs."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--files-per-hour",
        type=int,
        nargs="*",
        default=[1, 1, 0],
        help="landing runs, in order, each into a fresh output (1 = one "
        "file per topic and hour, the default; 0 = no shuffle). The "
        "first run is the JVM's first job (cold, like a nightly run)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="then this many Iceberg landings, each next to a warm Parquet one (files_per_hour=1 "
        "on file://), alternating; medians printed (0: no Iceberg)",
    )
    parser.add_argument("--iceberg-on", choices=["hdfs", "file"], default="hdfs", help="where the warehouse is")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), e.g. spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
    )
    parser.add_argument(
        "--cases",
        default="parquet:1,iceberg:1,iceberg:0",
        help="the --repeat rounds' landings, FORMAT:FILES_PER_HOUR, comma-separated "
        "(iceberg:0 = no shuffle by hour, fanout writers)",
    )
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="logferry-bench-load-") as tmp:
        workdir = Path(tmp)
        with LocalCluster(workdir, brokers=1, broker={"num_partitions": PARTITIONS}) as cluster:
            zk = cluster.zk_connect
            seconds = produce(zk, args.messages)
            print(f"produced {args.messages:,} x 200 B in {seconds:.1f} s")
            wait_visible(zk)
            rows, seconds = consume_all(zk)
            assert rows == args.messages, rows
            ceiling = rows / seconds
            print(f"ceiling  SimpleConsumer read:          {ceiling:>10,.0f} rows/s ({seconds:.2f} s)")

            from pyspark.sql import SparkSession

            t0 = time.perf_counter()
            builder = (
                SparkSession.builder.master(args.master)
                .appName("loader-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", "1g")
                .config("spark.sql.shuffle.partitions", "4")
            )
            for key, value in iceberg_conf(args.repeat).items():
                builder = builder.config(key, value)
            for setting in args.spark_conf:
                key, _, value = setting.partition("=")
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            print(f"Spark session start ({args.master}):       {time.perf_counter() - t0:.1f} s (not counted below)")
            for n, variant in enumerate(args.files_per_hour):
                out = workdir / f"wh-{n}"
                landed, seconds, size, files, phases = land(spark, zk, out, variant)
                assert landed == args.messages, landed
                label = "cold" if n == 0 else "warm"
                print(
                    f"landed   files_per_hour={variant} ({label}):    {landed / seconds:>10,.0f} "
                    f"rows/s ({seconds:.2f} s, {files} files, {size / 2**20:.0f} MiB "
                    f"Parquet, {landed / seconds / ceiling:.0%} of ceiling)"
                )
                print("           steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
            if args.repeat > 0:
                compare_with_iceberg(spark, zk, workdir, args, ceiling)
            spark.stop()
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
