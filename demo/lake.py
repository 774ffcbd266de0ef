"""The analysis datacenter's lake in ``logferry demo``: HDFS with an Iceberg table per topic.

By default (``--lake hdfs``) the demo lands the way LinkedIn's analysis datacenter did,
into Hadoop: it starts its own HDFS (Apache Hadoop's NameNode and DataNode,
:mod:`broker.testing.hdfs`) in ``<workdir>/hdfs`` on free ports of 127.0.0.1, and the
loader lands each topic as an Apache Iceberg table in a Hadoop catalog there
(``output.format = "iceberg"``, docs/loader.md "Iceberg"). ``--lake file`` keeps the
local Parquet of before (no HDFS, no Iceberg).

The two JVMs take 10-50 s to start on a busy 2-core machine, and the lake is needed only
when the loader runs, so :class:`HdfsLake` starts them on a thread of their own while
the pipeline runs; the demo asks :meth:`HdfsLake.failure` at each progress line (a
failed start ends the demo at once, one line) and :meth:`HdfsLake.wait` before the
loader. :meth:`HdfsLake.stop` ends them whatever state the start is in (bounded).

What the report counts of a table is read from the table itself, without a JVM: its
metadata file over WebHDFS (:meth:`HdfsLake.table_counts`: the current snapshot's
``total-records`` and ``total-data-files``), not from the loader's own summary.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from broker.testing.hdfs import HdfsError, HdfsStartError, LocalHdfs, discover_install, start_on_free_ports
from broker.testing.iceberg_jars import INSTALL_HINT as ICEBERG_HINT
from broker.testing.iceberg_jars import JARS as ICEBERG_JARS
from broker.testing.iceberg_jars import runtime_jar
from demo.processes import DemoError

LAKES = ("hdfs", "file")
"""``--lake`` choices: HDFS with Iceberg tables (the default), or local Parquet."""
START_TIMEOUT = 150.0
"""Seconds the two servers may take until they take writes (42-50 s measured with the
load average at 15, docs/loader.md)."""
STOP_BOUND = 60.0
WAREHOUSE = "/warehouse"
"""The Iceberg warehouse's path on the demo's HDFS."""
CATALOG = "demo"
"""The Spark catalog name the report's query gives the warehouse."""


def missing(lake: str) -> str | None:
    """Why the demo cannot land into ``lake`` on this install (one line), or None."""
    if lake != "hdfs":
        return None
    try:
        discover_install()
    except HdfsError as exc:
        reason = str(exc)
    else:
        if runtime_jar() is not None:
            return None
        reason = f"{ICEBERG_JARS.missing_reason()}; {ICEBERG_HINT}"
    return (
        f"the demo lands into HDFS as Iceberg tables (--lake hdfs, the default) and {reason}; "
        "or run it with --lake file"
    )


class HdfsLake:
    """The demo's HDFS and where its Iceberg tables are."""

    def __init__(self, workdir: Path, namespace: str = "logferry"):
        self.data_dir = workdir / "hdfs"
        self.namespace = namespace
        self.hdfs: LocalHdfs | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._start, name="demo-hdfs", daemon=True)
        self.seconds = 0.0
        """How long the start took."""

    # -- start

    def start(self) -> None:
        """Start the NameNode and the DataNode in the background."""
        self._thread.start()

    def _made(self, hdfs: LocalHdfs) -> None:
        with self._lock:
            self.hdfs = hdfs
            if self._stopping:  # stop() ran while this attempt was chosen: do not start it
                raise HdfsStartError("the demo is stopping")

    def _start(self) -> None:
        started = time.monotonic()
        try:
            # detached (a session of their own), as ZooKeeper: Ctrl-C reaches the demo,
            # which stops them in order
            start_on_free_ports(self.data_dir, START_TIMEOUT, detach=True, made=self._made)
        except BaseException as exc:  # noqa: BLE001 - kept for the demo's thread to report
            self._error = exc
        self.seconds = time.monotonic() - started

    def failure(self) -> None:
        """Raise :class:`DemoError` (one line, where the logs are) if the start failed."""
        error = self._error
        if error is None or self._stopping:
            return
        text = error.summary if isinstance(error, HdfsStartError) else str(error).splitlines()[0]
        logs = self.hdfs.log_dir if self.hdfs is not None else self.data_dir / "logs"
        raise DemoError(f"HDFS did not start: {text} (logs in {logs})")

    def wait(self, timeout: float = START_TIMEOUT) -> LocalHdfs:
        """The running HDFS, once it takes writes; :class:`DemoError` otherwise."""
        self._thread.join(timeout)
        self.failure()
        if self._thread.is_alive() or self.hdfs is None:
            raise DemoError(f"HDFS did not take writes within {timeout:.0f}s (logs in {self.data_dir / 'logs'})")
        return self.hdfs

    def planned(self, timeout: float = 10.0) -> LocalHdfs | None:
        """The HDFS being started, once its ports are chosen (it may not listen yet); None
        when none was chosen within ``timeout`` s (the start failed first)."""
        deadline = time.monotonic() + timeout
        while self.hdfs is None and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.hdfs

    @property
    def ready(self) -> bool:
        return not self._thread.is_alive() and self._error is None and self.hdfs is not None

    # -- stop

    def stop(self) -> list[str]:
        """Stop both servers, also while they are still starting (bounded); the problems seen."""
        with self._lock:
            self._stopping = True
        problems: list[str] = []
        deadline = time.monotonic() + STOP_BOUND
        while True:
            # a start in flight sees its server die and gives up; a formatting one starts
            # nothing once it sees _stopping (or is stopped on the next round)
            hdfs = self.hdfs
            if hdfs is not None:
                try:
                    hdfs.stop()
                except (HdfsError, OSError) as exc:
                    problems.append(f"HDFS: {exc}")
            if not self._thread.is_alive() or time.monotonic() > deadline:
                break
            self._thread.join(2.0)
        if self._thread.is_alive():
            problems.append(f"HDFS was still starting after {STOP_BOUND:.0f}s (pids {self.data_dir}/*.pid)")
        return problems

    # -- the tables

    @property
    def warehouse(self) -> str:
        """The Iceberg warehouse's URI (``output.uri`` of the loader)."""
        assert self.hdfs is not None
        return self.hdfs.uri + WAREHOUSE

    def table_location(self, topic: str) -> str:
        return f"{self.warehouse}/{self.namespace}/{topic}"

    def table_counts(self, topic: str) -> tuple[int, int] | None:
        """(rows, data files) of the topic's table as its current snapshot says, read from
        its metadata over WebHDFS; None when the table does not exist."""
        assert self.hdfs is not None
        metadata = f"{WAREHOUSE}/{self.namespace}/{topic}/metadata"
        try:
            version = self.hdfs.read_file(f"{metadata}/version-hint.text").decode().strip()
            meta = json.loads(self.hdfs.read_file(f"{metadata}/v{version}.metadata.json"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DemoError(f"cannot read the table {self.table_location(topic)}: {exc}") from None
        return snapshot_counts(meta)


def snapshot_counts(meta: dict[str, object]) -> tuple[int, int]:
    """(total-records, total-data-files) of an Iceberg metadata file's current snapshot
    ((0, 0) for a table without one)."""
    current = meta.get("current-snapshot-id")
    snapshots = meta.get("snapshots")
    for snapshot in snapshots if isinstance(snapshots, list) else []:
        if isinstance(snapshot, dict) and snapshot.get("snapshot-id") == current:
            summary = snapshot.get("summary", {})
            return int(summary.get("total-records", 0)), int(summary.get("total-data-files", 0))
    return 0, 0


__all__ = ["CATALOG", "LAKES", "HdfsLake", "missing", "snapshot_counts"]
