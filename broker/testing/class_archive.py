"""Build Spark's class archive for the short-lived Spark JVMs of tests and the demo.

    python -m broker.testing.class_archive        (``make test`` and ``make demo`` run it)

A JVM started with ``-XX:ArchiveClassesAtExit=<file>`` writes every class it loaded
from its classpath into ``<file>`` as it exits; later JVMs started with
``-XX:SharedArchiveFile=<file>`` map those classes instead of parsing and verifying
them again (:mod:`broker.testing.jvm` says what that saves). This runs one small Spark
job in a child process that does what the loader does (a Python data source yielding
Arrow batches, a partitioned Parquet write, a read back), lets its JVM exit, and moves
the archive into place in one rename, so a half-written archive is never seen.

Nothing to do when the archive for this JVM and these jars exists. Without Java or
pyspark there is nothing to build; a failed build prints one warning: the JVMs then run
without the archive, slower but the same. Exit status 0 in all three cases, 2 for a
wrong argument.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from broker.testing.jvm import QUICK_JVM_OPTIONS_LINE, spark_archive_path

BUILD_TIMEOUT_S = 300.0
"""One small Spark job: about 20 s of CPU on an idle 2-core machine."""

ROWS = 2000


def build_spark_archive(path: Path, timeout: float = BUILD_TIMEOUT_S) -> None:
    """Run the workload in a child process dumping to a temporary file beside ``path``,
    then rename it to ``path``. Raises RuntimeError with the child's last words."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "broker.testing.class_archive", "--spark-workload", str(temporary)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0 or not temporary.is_file() or temporary.stat().st_size == 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"the Spark job exited {result.returncode} without an archive: {last}")
        for stale in path.parent.glob("spark-*.jsa"):
            stale.unlink(missing_ok=True)  # archives of an earlier JVM or Spark
        os.replace(temporary, path)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the Spark job took more than {timeout:.0f} s") from None
    finally:
        temporary.unlink(missing_ok=True)


def run_spark_workload(dump_to: Path) -> None:
    """A loader-like Spark job in a JVM that writes its classes to ``dump_to`` on exit;
    returns once that JVM has exited."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers need this interpreter's pyarrow
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("logferry-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", f"{QUICK_JVM_OPTIONS_LINE} -XX:ArchiveClassesAtExit={dump_to}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    source: Any = _arrow_rows_source()
    session.dataSource.register(source)
    with tempfile.TemporaryDirectory(prefix="logferry-class-archive-") as out:
        frame = session.read.format(source.name()).load()
        frame.write.partitionBy("hour").mode("overwrite").parquet(out)
        landed = session.read.parquet(out).groupBy("hour").count().collect()
        if sum(row["count"] for row in landed) != ROWS:
            raise RuntimeError(f"the archive's Spark job read back {landed}, not {ROWS} rows")
    session.stop()
    gateway: Any = SparkContext._gateway  # the JVM exits when its stdin closes
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=120)


def _arrow_rows_source() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> Sequence[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            first = partition.value * (ROWS // 2)
            ids = list(range(first, first + ROWS // 2))
            yield pa.RecordBatch.from_pydict(
                {"id": ids, "hour": [i % 3 for i in ids], "value": [b"x" * 40 for _ in ids]}
            )

    class ArrowRows(DataSource):
        @classmethod
        def name(cls) -> str:
            return "logferry_class_archive_rows"

        def schema(self) -> str:
            return "id long, hour long, value binary"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return ArrowRows


def main(argv: Sequence[str] | None = None) -> int:
    """Build Spark's archive when it is missing; 0 unless the arguments are wrong."""
    parser = argparse.ArgumentParser(prog="python -m broker.testing.class_archive", description=__doc__.split("\n")[0])
    parser.add_argument("--spark-workload", type=Path, metavar="DUMP", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spark_workload is not None:
        run_spark_workload(args.spark_workload)
        return 0
    path = spark_archive_path()
    if path is None:
        print("class archive: no Java or no pyspark here; nothing to build", file=sys.stderr)
        return 0
    if path.is_file():
        print(f"class archive: Spark's is up to date ({path})", file=sys.stderr)
        return 0
    print(f"class archive: building Spark's with one small Spark job (about 20 s) -> {path}", file=sys.stderr)
    started = time.monotonic()
    try:
        build_spark_archive(path)
    except (OSError, RuntimeError) as exc:
        print(f"class archive: warning: not built ({exc}); Spark JVMs start without it, slower", file=sys.stderr)
        return 0
    size_mb = path.stat().st_size / 1e6
    print(f"class archive: built in {time.monotonic() - started:.0f} s ({size_mb:.0f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
