"""The whole pipeline under kill -9 of every process kind: each line lands once (issues 20, 38).

Run it alone with ``pytest -m exactly_once``. Real processes throughout: ZooKeeper, two
live brokers (topic ``app`` replicated twice, the agent producing with ``acks=all``),
an agent tailing ``app.log`` through rename rotations, the mirror to one analysis
broker, ``logferry load`` (Spark local mode, dedup on) into an Iceberg table on a real
HDFS (Apache Hadoop's NameNode and DataNode: the analysis datacenter as deployed).
While 20,000 lines are written at a steady rate, kill -9 hits the agent (twice), the
leader of the agent's partition, the mirror (twice) and a load run as soon as it
writes its first data file into the table; each is restarted. The next load has the
NameNode and the DataNode killed with -9 as it writes its first data file, and both
started again (the whole HDFS crashes during a load). Then the agent and the mirror
drain and a last load lands everything. Counted:

- the live topic: every line once (the agent resumes after what the cluster holds,
  the idempotent producer drops retries across the leader change);
- the analysis topic: the same records at the same offsets as the live topic, 0
  duplicates (the offset-preserving mirror resumes from the target's log end; any
  duplicates are printed with the mirror's log before the assertion);
- the table's rows on HDFS, read with Spark SQL: exactly the lines written, each once
  by record identity (``file_id`` + ``file_offset``), in order per file, with the
  loader's dedup on (the last line of defence: it drops a copy that came through, e.g.
  re-sent by an agent that could not reach the cluster when it restarted). The table's
  commit is the exactly-once point: the killed load and the load under the HDFS crash
  commit nothing (or all), and the rows and offsets of every commit come together.

Parquet on ``file://`` keeps its own kill -9 test at every step of its commit
(tests/loader/test_crash_integration.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import pytest

from broker.client import Admin
from broker.testing.hdfs import LocalHdfs
from hadoop_loader.config import load_config
from hadoop_loader.iceberg import DUPLICATES, LOAD, table_name
from hadoop_loader.job import run_load
from tests.agent.conftest import REPO, agent_process, consume  # noqa: F401 - a fixture
from tests.agent.test_integration import _wait_shipped, base_doc
from tests.loader.conftest import (
    iceberg_jar,
    iceberg_spark_conf,
    loader_command,
    spark,  # noqa: F401 - a fixture
    write_loader_toml,
)
from tests.mirror.conftest import mirrors  # noqa: F401 - a fixture
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.exactly_once,
    pytest.mark.timeout(480),
    pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`"),
]

LINES = 20_000
ROTATE_EVERY = 5_000
RATE = 500
"""Lines per second written (about 40 s of writing)."""
HOST = "it-host"  # base_doc's host: the key, so all lines go to one partition


def line_text(i: int) -> str:
    return f"line {i:07d} of the exactly-once test"


class Writer(threading.Thread):
    """Appends numbered lines to ``app.log`` at a steady rate, renaming it every
    ``ROTATE_EVERY`` lines to ``app.log.<n>`` (not matched by the agent's ``*.log``)."""

    def __init__(self, log: Path):
        super().__init__(daemon=True)
        self.log = log
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            step = RATE // 10
            started = time.monotonic()
            while self.written < LINES:
                n = min(step, LINES - self.written)
                with open(self.log, "ab") as handle:
                    handle.write("".join(line_text(self.written + i) + "\n" for i in range(n)).encode())
                self.written += n
                if self.written % ROTATE_EVERY == 0 and self.written < LINES:
                    os.rename(self.log, self.log.with_name(f"app.log.{self.written // ROTATE_EVERY}"))
                pause = started + self.written / RATE - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def start_load(config: Path, log: Path) -> subprocess.Popen:
    """``python -m hadoop_loader load`` in its own process group (its Spark JVM with it)."""
    argv, env = loader_command(config)
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def kill_group(proc: subprocess.Popen) -> None:
    """kill -9 the load and its JVM (the process group this test created)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def first_write(hdfs: LocalHdfs, data: str, load: subprocess.Popen, before: int, timeout: float = 180.0) -> bool:
    """Wait until the table's ``data`` folder holds more than ``before`` files (the load
    writes: True) or the load ended first (False); at most ``timeout`` s."""
    outcome = wait_until(
        lambda: "writing" if hdfs.file_count(data) > before else ("ended" if load.poll() is not None else None),
        timeout,
        "the load to write its first data file, or to end",
        interval=0.1,
    )
    return outcome == "writing"


class OnFirstWrite(threading.Thread):
    """Runs ``action`` as soon as a load writes its first data file (not at all when the
    load ends first): a fault at a point of the load, not at a time."""

    def __init__(self, hdfs: LocalHdfs, data: str, load: subprocess.Popen, action: Callable[[], None]):
        super().__init__(daemon=True)
        self.args_ = (hdfs, data, load, hdfs.file_count(data))
        self.action = action
        self.hit = False
        self.at = 0.0
        """When the action ran (time.monotonic())."""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.hit = first_write(*self.args_)
            if self.hit:
                self.at = time.monotonic()
                self.action()
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def crash_hdfs(hdfs: LocalHdfs) -> None:
    """kill -9 the DataNode and the NameNode, then start both again (the NameNode first;
    returns once a file can be written again: a live DataNode, safe mode off)."""
    hdfs.kill_server("datanode")
    hdfs.kill_server("namenode")
    hdfs.start_server("namenode", wait=False)
    hdfs.start_server("datanode")


def load_outcome(code: int, log: Path, since: int) -> str:
    """A load that ended: 0, or 1 with the loader's one-line error (no traceback)."""
    text = log.read_bytes()[since:].decode(errors="replace")
    assert code in (0, 1), f"load exited {code}:\n{text[-4000:]}"
    if code == 0:
        return "committed"
    errors = [line for line in text.splitlines() if line.startswith("logferry load: error: ")]
    assert len(errors) == 1 and "Traceback" not in text, text[-4000:]
    return f"failed: {errors[0][:200]}"


def identities(bootstrap: list[str]) -> list[tuple[int, int, str]]:
    """``(fid, offset, line)`` of every record of topic ``app``, in partition order."""
    return [(v["fid"], v["offset"], v["line"]) for _, _, v in consume(bootstrap, "app")]


def layout(bootstrap: list[str]) -> dict[int, tuple[int, int]]:
    """Per partition of ``app``: (records, visible end)."""
    from broker.client import SimpleConsumer

    counts = Counter(partition for partition, _, _ in consume(bootstrap, "app"))
    with SimpleConsumer(brokers=bootstrap) as consumer:
        return {p: (counts[p], consumer.offsets("app", p).end) for p in consumer.partitions("app")}


# The test's parameters are the fixtures imported above, by the same names (F811 would be
# an inline noqa on the signature, which the formatter moves off the line it is for).
# ruff: noqa: F811
def test_every_line_lands_once_under_kill_9_of_every_process(
    zookeeper, broker_cluster, agent_process, mirrors, hdfs: LocalHdfs, hdfs_dir: str, spark, tmp_path: Path
) -> None:
    live = broker_cluster(2, zk=zookeeper.new_chroot())
    analysis = broker_cluster(1, zk=zookeeper.new_chroot())
    with Admin(zk=live.zk_connect) as admin:
        admin.create_topic("app", partitions=2, replication_factor=2)
    with Admin(zk=analysis.zk_connect) as admin:
        admin.create_topic("app", partitions=2)
    partition = zlib.crc32(HOST.encode()) % 2

    doc = base_doc(
        tmp_path,
        live.bootstrap,
        checkpoint_interval_s=3.0,
        producer={"acks": "all", "linger_ms": 5, "delivery_timeout_s": 30.0, "request_timeout_s": 5.0},
        audit={"enabled": False},
    )
    agent = agent_process(doc).start()
    # The fixture's default is the re-producing mirror (mode "produce", at least once: a
    # kill -9 re-copies everything after the last committed source position); this test
    # is about the offset-preserving one, so it says so and checks it below.
    mirror = mirrors("m", live, analysis, topics=["app"], mode="preserve")
    config = tmp_path / "loader.toml"
    write_loader_toml(
        config,
        analysis.zk_connect,
        hdfs_dir,
        ["app"],
        source="decode_agent_records = true",
        output='format = "iceberg"',
        extra="""
[dedup]
enabled = true
""",
        spark_conf=iceberg_spark_conf(),
    )
    data = f"{urlparse(hdfs_dir).path}/logferry/app/data"  # the table's data files
    load_log = tmp_path / "load.log"

    writer = Writer(tmp_path / "logs" / "app.log")
    writer.start()
    t0 = time.monotonic()

    def at(seconds: float) -> None:
        time.sleep(max(t0 + seconds - time.monotonic(), 0))

    wait_until(
        lambda: mirror.status().get("mode") == "preserve",
        60,
        "the mirror to report mode preserve in its status file",
        interval=0.5,
    )
    kills: list[str] = []
    # The first load starts now (its JVM's start and its planning take most of a minute
    # here, while the faults below go on) and is killed -9 as it writes its first file.
    killed_load = start_load(config, load_log)
    kill_on_write = OnFirstWrite(hdfs, data, killed_load, lambda: kill_group(killed_load))
    kill_on_write.start()
    at(6)
    agent.kill()
    kills.append(f"agent at {writer.written} ({time.monotonic() - t0:.0f} s)")
    agent = agent_process(doc).start()
    at(12)
    with Admin(zk=live.zk_connect) as admin:
        leader_id = admin.describe_partitions("app")[partition].leader
    leader = next(b for b in live.brokers if b.id == leader_id)
    leader.kill()
    kills.append(f"leader {leader_id} at {writer.written} ({time.monotonic() - t0:.0f} s)")
    time.sleep(8)  # past the ZooKeeper session: the follower takes over under acks=all
    leader.start()
    at(24)
    mirror.kill()
    kills.append(f"mirror at {writer.written} ({time.monotonic() - t0:.0f} s)")
    mirror.start()
    at(30)
    skipped = [agent.counter("resume_skipped")]
    agent.kill()
    kills.append(f"agent at {writer.written} ({time.monotonic() - t0:.0f} s)")
    agent = agent_process(doc).start()
    at(34)
    mirror.kill()
    kills.append(f"mirror at {writer.written} ({time.monotonic() - t0:.0f} s)")
    mirror.start()
    kill_on_write.join(240)
    assert not kill_on_write.is_alive() and kill_on_write.error is None, kill_on_write.error
    assert kill_on_write.hit, (
        f"the load ended before writing (exit {killed_load.poll()}): {load_log.read_text()[-4000:]}"
    )
    killed_load.wait(30)
    kills.append(f"loader as it wrote ({kill_on_write.at - t0:.0f} s)")

    since = load_log.stat().st_size
    crashed_load = start_load(config, load_log)  # the whole HDFS killed -9 as it writes
    assert first_write(hdfs, data, crashed_load, hdfs.file_count(data)), load_log.read_text()[-4000:]
    crashed_at = time.monotonic() - t0
    crash_hdfs(hdfs)
    kills.append(f"DataNode and NameNode as a load wrote at {crashed_at:.0f} s (back at {time.monotonic() - t0:.0f} s)")
    crashed = load_outcome(crashed_load.wait(240), load_log, since)
    crashed += f" (ended at {time.monotonic() - t0:.0f} s)"

    writer.join(120)
    assert writer.error is None and writer.written == LINES, writer.error
    _wait_shipped(agent, 90)
    skipped.append(agent.counter("resume_skipped"))
    expected = [line_text(i) for i in range(LINES)]

    live_records = identities(live.bootstrap)
    live_copies = Counter((fid, offset) for fid, offset, _ in live_records)
    live_duplicates = sum(n - 1 for n in live_copies.values())

    def mirrored() -> bool:
        return len({(f, o) for f, o, _ in identities(analysis.bootstrap)}) >= LINES

    wait_until(mirrored, 90, "the analysis topic to hold every line", interval=1.0)
    analysis_records = identities(analysis.bootstrap)
    copies = Counter((fid, offset) for fid, offset, _ in analysis_records)
    analysis_duplicates = sum(n - 1 for n in copies.values())

    final = run_load(load_config(config), spark=spark)  # the test's JVM: it reads the table next
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in final.phases.items())
    name = table_name(hdfs_dir, "logferry", "app")
    rows = [r.asDict() for r in spark.sql(f"SELECT file_id, file_offset, line FROM {name}").collect()]
    landed = Counter((r["file_id"], r["file_offset"]) for r in rows)
    lines = {r["line"] for r in rows}
    duplicated_rows = sum(n - 1 for n in landed.values())
    missing = len(set(expected) - lines)
    loads = [
        (r["summary"].get(LOAD), r["summary"].get("added-records"), r["summary"].get(DUPLICATES))
        for r in spark.sql(f"SELECT summary FROM {name}.snapshots ORDER BY committed_at").collect()
    ]
    print(
        f"kills: {', '.join(kills)}; lines skipped by the restarted agents as already held: "
        f"{skipped}; written {LINES}; live topic {len(live_records)} records "
        f"({live_duplicates} duplicates); analysis topic {len(analysis_records)} records "
        f"({analysis_duplicates} duplicates before the loader's dedup); the load under the HDFS crash "
        f"{crashed}; the last load {final.rows} rows, {final.duplicates} duplicate(s) dropped, "
        f"ended at {time.monotonic() - t0:.0f} s, steps {steps}; table "
        f"{len(rows)} rows, {duplicated_rows} duplicated, {missing} missing; loads (number, rows, "
        f"duplicates dropped): {loads}"
    )
    live_layout, analysis_layout = layout(live.bootstrap), layout(analysis.bootstrap)
    print(f"per partition (records, end): live {live_layout}, analysis {analysis_layout}")
    if analysis_duplicates:
        print(f"--- mirror log ---\n{mirror.log_tail(60)}")
    for (fid, offset), n in sorted(copies.items()):
        if n > 1:
            print(f"  analysis duplicate: fid {fid} offset {offset} x{n}")

    assert {line for _, _, line in live_records} == set(expected)
    assert live_duplicates == 0
    # The offset-preserving mirror (mode "preserve", the default): the analysis topic is
    # the live one, same records at the same offsets, nothing copied twice.
    assert analysis_duplicates == 0
    assert analysis_layout == live_layout
    assert (len(rows), duplicated_rows, missing) == (LINES, 0, 0)
    by_file: dict[int, list[tuple[int, str]]] = {}
    for r in rows:
        by_file.setdefault(r["file_id"], []).append((r["file_offset"], r["line"]))
    assert len(by_file) == LINES // ROTATE_EVERY
    for fid, file_rows in by_file.items():
        ordered = [line for _, line in sorted(file_rows)]
        assert ordered == sorted(ordered), f"file {fid}: lines out of order by offset"
