"""The landing job on a real HDFS (Apache Hadoop's NameNode and DataNode, tests/support/hdfs.py).

``output.uri = "hdfs://..."`` goes through Spark's own Hadoop client for the data and
through hadoop_loader/fs.py's HadoopFileSystem for the manifests, the lock and the
renames, so HDFS's create-without-overwrite and rename semantics carry the commit here.
Each test counts: what was sent lands once, read back with Spark from HDFS.

- a load lands every message exactly once; a rerun lands nothing twice;
- a landed file deleted and another truncated on HDFS are found, and ``--repair`` lands
  them again: every message once;
- an unreachable NameNode and a NameNode in safe mode each give one line and exit 1,
  with nothing landed; once safe mode is left the next run lands everything once;
- a lease left on the manifest's temporary name by a writer killed with -9 does not
  block the next commit;
- a DataNode killed mid-write, or the NameNode restarted during a load: the next run
  lands every message once (LOGFERRY_HDFS_FAULTS=1 only: about 80 s each);
- a full DataNode under an Iceberg table: one line, exit 1, the table unchanged; the
  next run lands the rest once (LOGFERRY_HDFS_FAULTS=1 only).

One HDFS for the module (its start is the expensive part), one directory per test.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.testing.hdfs import discover_install, read_site_xml, render_site_xml
from hadoop_loader import cli
from hadoop_loader.config import config_from_dict
from hadoop_loader.errors import LoaderError
from hadoop_loader.fs import HadoopFileSystem
from hadoop_loader.iceberg import table_name
from hadoop_loader.job import run_load
from tests.loader.conftest import SPARK_TEST_SECTIONS, iceberg_jar, produce
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def hdfs_config(zk: str, out: str, topics: list[str]):
    """A loader config landing into ``out`` (an hdfs:// URI), small chunks."""
    return config_from_dict(
        {
            "source": {"zk": zk, "topics": topics},
            "output": {"uri": out},
            "load": {"chunk_bytes": 1 << 20, "fetch_bytes": 256 * 1024},
            "spark": {"master": "local[2]"},
        }
    )


def write_toml(path: Path, zk: str, out: str, topics: list[str]) -> Path:
    path.write_text(
        f"""
[source]
zk = "{zk}"
topics = {topics!r}
[output]
uri = "{out}"
{SPARK_TEST_SECTIONS}""".replace("'", '"')
    )
    return path


def landed_rows(spark: Any, out: str) -> list[tuple[str, int, int, int, bytes]]:
    """Every published row's identity and value, read from HDFS with Spark (which skips
    ``_logferry``)."""
    rows = spark.read.parquet(out).select("topic", "partition", "offset", "index", "value").collect()
    return [(r["topic"], r["partition"], r["offset"], r["index"], bytes(r["value"])) for r in rows]


def assert_each_once(spark: Any, out: str, sent: dict[str, dict[int, list[tuple[bytes, int]]]]) -> None:
    """The rows on HDFS are exactly the sent messages: per partition in offset order, none twice."""
    rows = landed_rows(spark, out)
    ids = [r[:4] for r in rows]
    assert len(ids) == len(set(ids)), "a message landed twice"
    expected = sum(len(v) for parts in sent.values() for v in parts.values())
    assert len(rows) == expected, f"sent {expected}, landed {len(rows)}"
    for topic, parts in sent.items():
        for p, messages in parts.items():
            got = [r[4] for r in sorted(r for r in rows if r[0] == topic and r[1] == p)]
            assert got == [v for v, _ in messages], f"{topic}/{p}"


def data_files(fs: HadoopFileSystem, out: str) -> dict[str, str]:
    """``hr=NN`` -> the published Parquet file of that hour."""
    return {
        f.uri.split("/")[-2]: f.uri
        for f in fs.list_files(out)
        if f.uri.endswith(".parquet") and "/_logferry/" not in f.uri
    }


def test_load_lands_each_message_once_and_a_rerun_nothing(spark, module_cluster, unique_name, hdfs_dir):
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-once")
    sent = {topic: produce(zk, topic, 2, 4_000, hours=3)}
    config = hdfs_config(zk, hdfs_dir, [topic])
    first = run_load(config, spark=spark)
    assert first.sequence == 1 and first.rows == 4_000
    assert_each_once(spark, hdfs_dir, sent)
    fs = HadoopFileSystem(spark)
    assert sorted(data_files(fs, hdfs_dir)) == ["hr=00", "hr=01", "hr=02"]
    assert fs.list_names(f"{hdfs_dir}/_logferry/manifests") == ["00000000000000000001.json"]
    assert fs.list_names(f"{hdfs_dir}/_logferry/staging") == [] and not fs.exists(f"{hdfs_dir}/_logferry/lock")

    second = run_load(config, spark=spark)  # verifies the three files on HDFS, lands nothing
    assert second.sequence is None and second.rows == 0 and second.lake.ok and second.lake.rows == 4_000
    assert_each_once(spark, hdfs_dir, sent)


@pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`")
def test_iceberg_tables_on_hdfs_land_each_message_once(spark, module_cluster, unique_name, hdfs_dir):
    """``format = "iceberg"`` with the warehouse on HDFS: the Hadoop catalog's commit (a
    rename HDFS refuses over an existing metadata file) carries the offsets."""
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-ice")
    sent = produce(zk, topic, 2, 4_000, hours=3)
    config = config_from_dict(
        {
            "source": {"zk": zk, "topics": [topic]},
            "output": {"uri": hdfs_dir, "format": "iceberg"},
            "load": {"chunk_bytes": 1 << 20, "fetch_bytes": 256 * 1024},
            "spark": {"master": "local[2]"},
        }
    )
    first = run_load(config, spark=spark)
    assert first.rows == 4_000 and first.sequence == 1
    name = table_name(hdfs_dir, "logferry", topic)
    rows = spark.sql(f"SELECT partition, offset, index, value FROM {name}").collect()
    assert len({(r[0], r[1], r[2]) for r in rows}) == len(rows) == 4_000
    for p, messages in sent.items():
        assert [bytes(r[3]) for r in sorted(r for r in rows if r[0] == p)] == [v for v, _ in messages]
    fs = HadoopFileSystem(spark)
    assert fs.exists(f"{hdfs_dir}/logferry/{topic}/metadata/version-hint.text")
    assert not fs.exists(f"{hdfs_dir}/_logferry/lock")
    second = run_load(config, spark=spark)
    assert second.sequence is None and second.rows == 0
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == 4_000


def test_missing_and_damaged_files_are_found_and_repaired(
    spark, module_cluster, unique_name, hdfs_dir, tmp_path, capsys
):
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-repair")
    sent = {topic: produce(zk, topic, 2, 3_000, hours=3)}
    assert run_load(hdfs_config(zk, hdfs_dir, [topic]), spark=spark).rows == 3_000
    fs = HadoopFileSystem(spark)
    files = data_files(fs, hdfs_dir)
    fs.delete(files["hr=00"])
    whole = fs.read_bytes(files["hr=01"])
    fs.delete(files["hr=01"])
    fs.create_new(files["hr=01"], whole[: len(whole) // 2])  # truncated: no footer

    config_file = write_toml(tmp_path / "loader.toml", zk, hdfs_dir, [topic])
    capsys.readouterr()
    assert cli.main(["load", "--config", str(config_file)]) == 1
    captured = capsys.readouterr()
    assert "2 of 3 landed file(s) MISSING OR DAMAGED" in captured.out
    assert "missing: the file is gone" in captured.out and "no readable footer" in captured.out
    assert captured.err.startswith("logferry load: error: 2 landed file(s) missing or damaged")

    assert cli.main(["load", "--config", str(config_file), "--repair"]) == 0
    assert capsys.readouterr().out.count("REPAIRED ") == 2
    assert_each_once(spark, hdfs_dir, sent)
    assert run_load(hdfs_config(zk, hdfs_dir, [topic]), spark=spark).lake.ok


def test_unreachable_namenode_is_one_line_and_nothing_lands(spark, module_cluster, unique_name, tmp_path, capsys):
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-down")
    produce(zk, topic, 1, 200, hours=1)
    out = f"hdfs://127.0.0.1:{free_port()}/wh"  # nothing listens there
    conf = spark._jsc.hadoopConfiguration()
    retries = conf.get("ipc.client.connect.max.retries")
    conf.setInt("ipc.client.connect.max.retries", 0)  # fail at once, not after 10 s of retries
    try:
        capsys.readouterr()
        code = cli.main(["load", "--config", str(write_toml(tmp_path / "loader.toml", zk, out, [topic]))])
    finally:
        conf.set("ipc.client.connect.max.retries", retries or "10")
    captured = capsys.readouterr()
    assert code == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"logferry load: error: cannot reach the NameNode at {out[7:-3]} for {out}")
    assert "Connection refused" in lines[0] and lines[0].endswith("nothing was written")


def test_safe_mode_at_start_is_one_line_then_the_next_run_lands_all(
    spark, module_cluster, unique_name, hdfs, hdfs_dir, tmp_path, capsys
):
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-safe")
    sent = {topic: produce(zk, topic, 2, 2_000, hours=2)}
    config_file = write_toml(tmp_path / "loader.toml", zk, hdfs_dir, [topic])
    hdfs.dfsadmin("-safemode", "enter")
    try:
        assert "Safe mode is ON" in hdfs.state().safe_mode
        capsys.readouterr()
        code = cli.main(["load", "--config", str(config_file)])
        captured = capsys.readouterr()
    finally:
        hdfs.dfsadmin("-safemode", "leave")
    assert code == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"logferry load: error: 127.0.0.1:{hdfs.port} is in safe mode (read-only)")
    fs = HadoopFileSystem(spark)
    assert not fs.exists(hdfs_dir), "something was written in safe mode"

    assert cli.main(["load", "--config", str(config_file)]) == 0
    assert_each_once(spark, hdfs_dir, sent)


def test_a_lease_left_by_a_killed_writer_does_not_block_the_commit(spark, module_cluster, unique_name, hdfs, hdfs_dir):
    """A writer killed with -9 while it had the manifest's temporary name open leaves
    that file under construction, its lease held by a dead client (HDFS frees it only
    after the lease's hard limit, an hour). The next run's commit still goes through:
    it deletes that name (HDFS allows it under a lease) and creates it anew."""
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-lease")
    sent = {topic: produce(zk, topic, 2, 1_000, hours=1)}
    tmp_uri = f"{hdfs_dir}/_logferry/manifests/.00000000000000000001.json.tmp"
    writer = subprocess.Popen(
        hdfs.command(discover_install(), "writer", "org.apache.hadoop.fs.FsShell", "-put", "-d", "-", tmp_uri),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fs = HadoopFileSystem(spark)
    try:
        assert writer.stdin is not None
        writer.stdin.write(b'{"half a manifest": ')
        writer.stdin.flush()
        wait_until(lambda: fs.exists(tmp_uri), 60, f"the writer to create {tmp_uri}")
    finally:
        writer.kill()
        writer.wait(30)
    dfs, path = fs._fs(tmp_uri)  # DistributedFileSystem: is the file still open for write?
    assert not dfs.isFileClosed(path), "the killed writer left no file under construction"

    result = run_load(hdfs_config(zk, hdfs_dir, [topic]), spark=spark)
    assert result.sequence == 1 and result.rows == 1_000
    assert fs.list_names(f"{hdfs_dir}/_logferry/manifests") == ["00000000000000000001.json"]
    assert_each_once(spark, hdfs_dir, sent)


@pytest.mark.parametrize("role", ["datanode", "namenode"])
def test_a_server_killed_mid_write_fails_the_run_and_the_next_lands_each_once(
    spark, module_cluster, unique_name, hdfs, hdfs_dir, role
):
    """The only DataNode, or the NameNode, is killed with -9 as soon as Spark opens its
    first staged file (the NameNode is started again at once: restarted during a load;
    the DataNode after the run ended). The run fails with one line (or, if the client's
    retries outlast the restart, lands); the next run picks up from the last commit, so
    there is one commit of everything and every message once. About 80 s each on a busy
    machine (two Spark jobs, a server restart), over the suite's budget: they run with
    LOGFERRY_HDFS_FAULTS=1."""
    if os.environ.get("LOGFERRY_HDFS_FAULTS") != "1":
        pytest.skip(f"a {role} killed mid-write takes about 80 s: run with LOGFERRY_HDFS_FAULTS=1")
    zk, topic = module_cluster.zk_connect, unique_name(f"hdfs-{role}")
    sent = {topic: produce(zk, topic, 2, 3_000, hours=2)}
    config = hdfs_config(zk, hdfs_dir, [topic])
    fs = HadoopFileSystem(spark)
    outcome: dict[str, Any] = {}

    def load() -> None:
        try:
            outcome["result"] = run_load(config, spark=spark)
        except LoaderError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=load, name=f"hdfs-{role}-load", daemon=True)
    thread.start()
    try:
        staging = f"{hdfs_dir}/_logferry/staging"
        wait_until(
            lambda: not thread.is_alive() or any(f.uri.endswith(".parquet") for f in fs.list_files(staging)),
            120,
            "Spark to open its first staged file",
            interval=0.05,
        )
        hdfs.kill_server(role)
        if role == "namenode":
            hdfs.start_server(role)
        thread.join(240)
        assert not thread.is_alive(), f"the run did not end with its {role} killed"
    finally:
        if hdfs.pid(role) is None:
            hdfs.start_server(role)
    if "error" in outcome:
        line = str(outcome["error"])
        assert "\n" not in line and "An error occurred while calling" not in line, line
        lock = f"{hdfs_dir}/_logferry/lock"
        if fs.exists(lock):
            # The failed run could not release its lock (its NameNode was down): the lock
            # names this process, whose next run takes it over (as a nightly run takes
            # over a dead process's), so a loader looping in one process goes on.
            assert json.loads(fs.read_bytes(lock))["pid"] == os.getpid()
        run_load(config, spark=spark)  # from the last commit: recovery, then what is left
    assert fs.list_names(f"{hdfs_dir}/_logferry/manifests") == ["00000000000000000001.json"]
    assert_each_once(spark, hdfs_dir, sent)


@pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`")
def test_a_full_datanode_fails_the_load_with_one_line_and_the_next_lands_each_once(
    spark, module_cluster, unique_name, hdfs, hdfs_dir, tmp_path, capsys
):
    """The only DataNode full (restarted with all of its disk reserved for other uses, so
    the NameNode places no block on it) while an Iceberg table has loads already: the load
    fails with one line and exit 1, the table keeps exactly its earlier rows; once the
    DataNode has room again the next load lands the rest, every message once.
    LOGFERRY_HDFS_FAULTS=1 only (two DataNode restarts and three loads)."""
    if os.environ.get("LOGFERRY_HDFS_FAULTS") != "1":
        pytest.skip("a full DataNode takes two DataNode restarts: run with LOGFERRY_HDFS_FAULTS=1")
    zk, topic = module_cluster.zk_connect, unique_name("hdfs-full")
    sent = produce(zk, topic, 2, 2_000, hours=2)
    config_file = write_toml(tmp_path / "loader.toml", zk, hdfs_dir, [topic])
    config_file.write_text(config_file.read_text().replace("[output]\n", '[output]\nformat = "iceberg"\n'))
    assert cli.main(["load", "--config", str(config_file)]) == 0
    name = table_name(hdfs_dir, "logferry", topic)
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == 2_000

    more = produce(zk, topic, 2, 2_000, hours=2, start=2_000)
    site = hdfs.conf_dir / "hdfs-site.xml"
    original = site.read_text()
    reserved = render_site_xml({**read_site_xml(site), "dfs.datanode.du.reserved": str(1 << 50)})
    try:
        site.write_text(reserved)
        hdfs.stop_server("datanode")
        hdfs.start_server("datanode")
        wait_until(lambda: hdfs.state().remaining_bytes == 0, 60, "the NameNode to see the DataNode full")
        capsys.readouterr()
        code = cli.main(["load", "--config", str(config_file)])
        captured = capsys.readouterr()
    finally:
        site.write_text(original)
        hdfs.stop_server("datanode")
        hdfs.start_server("datanode")
    assert code == 1, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logferry load: error: "), captured.err
    assert "could only be written to 0" in lines[0], lines[0]
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == 2_000, "the failed load committed rows"

    assert cli.main(["load", "--config", str(config_file)]) == 0
    rows = spark.sql(f"SELECT partition, offset, index, value FROM {name}").collect()
    assert len({(r[0], r[1], r[2]) for r in rows}) == len(rows) == 4_000
    for p in sent:
        got = [bytes(r[3]) for r in sorted(r for r in rows if r[0] == p)]
        assert got == [v for v, _ in sent[p] + more[p]], p
