"""What a Parquet run's verify step costs as the lake grows: every footer, or only new ones.

Builds a synthetic lake of ``--files`` real Parquet files (50 rows each) and real
committed manifests (``--files-per-run`` files each, as a 5-minute run of the
continuous mode lands a few), then times the run's own verify step
(:func:`hadoop_loader.verify.verify_store`: read the committed manifests, list the
output, check each file) three ways, side by side:

- cold: no footer cache, every footer read (every nightly run, the first run of a
  ``logferry load --every`` process, and every run before the cache);
- cached: the :class:`~hadoop_loader.lake_cache.LakeCache` of an earlier check, nothing
  changed since (no manifest or footer read: one listing and the bookkeeping);
- cached + a run: the same after one more run landed ``--files-per-run`` new files (the
  steady state of ``--every``: only the new run's manifest and footers are read).

It also times the cold step's manifests part alone (reading every committed manifest).
``--on file`` (default) builds the lake on local disk (in the page cache: the reads
cost system calls, not disk seeks); ``--on hdfs`` also starts a real
NameNode and DataNode (``broker.testing.hdfs``, jars from ``make hadoop-jars``) and a
Spark JVM for Hadoop's client, copies the lake there once, and times the same steps
through :class:`hadoop_loader.fs.HadoopFileSystem`.

    .venv/bin/python benchmarks/loader_verify.py --files 2000 10000
    .venv/bin/python benchmarks/loader_verify.py --files 2000 --on hdfs

Prints one line per lake size: the medians of ``--repeat`` timings, in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hadoop_loader.fs import FileSystem, LocalFileSystem, join  # noqa: E402
from hadoop_loader.lake_cache import LakeCache  # noqa: E402
from hadoop_loader.manifest import FileEntry, Manifest  # noqa: E402
from hadoop_loader.store import LandingStore, seq_name  # noqa: E402
from hadoop_loader.verify import LakeCheck, verify_store  # noqa: E402

ROWS = 50


def parquet_file(rows: int) -> bytes:
    """A small landed-like Parquet file (offset, timestamp, value) of ``rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    table = pa.table({"offset": list(range(rows)), "timestamp": [0] * rows, "value": [b"x" * 200] * rows})
    pq.write_table(table, out)
    return out.getvalue()


def run_manifest(sequence: int, per_run: int, size: int) -> Manifest:
    """Run ``sequence``'s manifest: ``per_run`` files of ``size`` bytes, an hour's
    directory per 12 runs (five-minute runs)."""
    hour = sequence // 12
    directory = f"topic=app/dt=2026-{1 + hour // 720:02d}-{1 + hour // 24 % 30:02d}/hr={hour % 24:02d}"
    entries = [
        FileEntry(f"{directory}/r{seq_name(sequence)[-8:]}-part-{i:05d}.parquet", f"part-{i:05d}.parquet", size, ROWS)
        for i in range(per_run)
    ]
    return Manifest(sequence, f"bench{sequence}", 0, 0, "bench", files=entries)


def write_runs(root: Path, runs: int, per_run: int, data: bytes) -> None:
    """Runs 1..``runs``, committed, written straight to local disk: the files at their
    published paths, the manifests in the manifest format."""
    store = LandingStore(LocalFileSystem(), "file://" + str(root))
    manifests = Path(LocalFileSystem.path(store.manifests))
    manifests.mkdir(parents=True, exist_ok=True)
    for sequence in range(1, runs + 1):
        manifest = run_manifest(sequence, per_run, len(data))
        for f in manifest.files:
            (root / f.path).parent.mkdir(parents=True, exist_ok=True)
            (root / f.path).write_bytes(data)
        (manifests / f"{seq_name(sequence)}.json").write_bytes(manifest.to_json())


def land_run(store: LandingStore, sequence: int, per_run: int, data: bytes) -> None:
    """One more committed run through the store's file system (local or HDFS)."""
    manifest = run_manifest(sequence, per_run, len(data))
    for f in manifest.files:
        store.fs.create_new(join(store.root, f.path), data)
    store.commit(manifest)


def timed(step: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Seconds ``step(*args)`` took, and what it returned."""
    started = time.perf_counter()
    out = step(*args)
    return time.perf_counter() - started, out


def measure(store: LandingStore, add_run: Callable[[], None], repeat: int) -> dict[str, float]:
    """Median seconds of the verify step cold, cached, and cached after one more run
    (each repeat starts from an empty cache: its cold check is the one that fills it)."""
    cold, cached, after_run, manifests = [], [], [], []
    for _ in range(repeat):
        cache = LakeCache()
        seconds, (_, check) = timed(verify_store, store, cache)
        cold.append(seconds)
        seconds, (_, warm) = timed(verify_store, store, cache)
        cached.append(seconds)
        same(check, warm, 0)
        add_run()
        seconds, (_, after) = timed(verify_store, store, cache)
        after_run.append(seconds)
        if not (after.ok and after.footers_read == after.files - check.files > 0 and after.manifests_read == 1):
            raise SystemExit(f"after a run: {after.files} files, {after.footers_read} footers read")
        manifests.append(timed(read_manifests, store)[0])
        print(f"        (cold {cold[-1]:.3f} s, cached {cached[-1]:.3f} s, after a run {seconds:.3f} s)", flush=True)
    return {
        "cold": statistics.median(cold),
        "cached": statistics.median(cached),
        "after_run": statistics.median(after_run),
        "manifests": statistics.median(manifests),
    }


def read_manifests(store: LandingStore) -> list[Manifest]:
    """The verify step's first part: every committed manifest."""
    return [store.read_manifest(s) for s in store.committed()]


def same(cold: LakeCheck, warm: LakeCheck, footers_read: int) -> None:
    """The cache must not change what verification finds, only what it reads."""
    if not (cold.ok and warm.ok and cold.rows == warm.rows and cold.landed == warm.landed):
        raise SystemExit(f"cached verification differs: cold {cold.rows} rows, cached {warm.rows}")
    if warm.footers_read != footers_read or cold.footers_read != cold.files or warm.manifests_read:
        raise SystemExit(f"footers read: cold {cold.footers_read}, cached {warm.footers_read}")


def hdfs_lake(stack: contextlib.ExitStack, workdir: Path) -> tuple[FileSystem, str, Any]:
    """A NameNode and DataNode, and a Spark JVM for Hadoop's client; returns the file
    system, a base URI in HDFS and the session."""
    from broker.testing.hdfs import LocalHdfs
    from broker.testing.localrun import free_port
    from hadoop_loader.fs import HadoopFileSystem

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    hdfs = LocalHdfs(workdir / "hdfs", free_port(), free_port())
    hdfs.start(180)
    stack.callback(hdfs.stop)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("loader-verify-bench")
        .config("spark.ui.enabled", "false")
        # a file's close polls the NameNode until the DataNode reported its block, first
        # after 400 ms: the copy of thousands of small files would take that each
        .config("spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms", "10")
        .getOrCreate()
    )
    stack.callback(spark.stop)
    spark.sparkContext.setLogLevel("ERROR")
    return HadoopFileSystem(spark), f"{hdfs.uri}/bench/wh", spark


def copy_into_hdfs(spark: Any, local: Path, uri: str) -> None:
    """``hdfs dfs -put``: the local tree into ``uri`` with one call of Hadoop's client."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    dst = jvm.org.apache.hadoop.fs.Path(uri)
    fs = dst.getFileSystem(conf)
    fs.delete(dst, True)
    fs.mkdirs(dst.getParent())
    fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path("file://" + str(local)), dst)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[2_000, 10_000], help="lake sizes, in files")
    parser.add_argument("--files-per-run", type=int, default=4, help="files each committed run landed")
    parser.add_argument("--repeat", type=int, default=3, help="timings per case (the median is printed)")
    parser.add_argument("--on", choices=["file", "hdfs"], default="file", help="where the lake is")
    args = parser.parse_args()
    data = parquet_file(ROWS)
    print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(
        f"verify step (manifests + listing + footers), seconds, median of {args.repeat}, on {args.on}; "
        f"{args.files_per_run} files per run, {len(data):,} bytes each"
    )
    header = ("files", "runs", "cold", "cached", "cached+run", "manifests", "cold/cached")
    print("{:>7} {:>6} {:>8} {:>8} {:>11} {:>10} {:>12}".format(*header))
    with tempfile.TemporaryDirectory(prefix="logferry-bench-verify-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        spark = None
        fs: FileSystem = LocalFileSystem()
        for files in args.files:
            runs = max(1, files // args.files_per_run)
            local = workdir / f"wh-{files}"
            write_runs(local, runs, args.files_per_run, data)
            uri = "file://" + str(local)
            if args.on == "hdfs":
                if spark is None:
                    fs, base, spark = hdfs_lake(stack, workdir)
                uri = f"{base}-{files}"
                seconds, _ = timed(copy_into_hdfs, spark, local, uri)
                print(f"        (copied {files:,} files into HDFS in {seconds:.0f} s)")
            store = LandingStore(fs, uri)
            sequences = iter(range(runs + 1, runs + 1 + args.repeat))

            def add_run(store: LandingStore = store, sequences: Any = sequences) -> None:
                land_run(store, next(sequences), args.files_per_run, data)

            figures = measure(store, add_run, args.repeat)
            print(
                f"{files:>7,} {runs:>6,} {figures['cold']:>8.3f} {figures['cached']:>8.3f} "
                f"{figures['after_run']:>11.3f} {figures['manifests']:>10.3f} "
                f"{figures['cold'] / figures['cached']:>11.1f}x"
            )
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
