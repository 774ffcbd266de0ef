"""``output.format = "iceberg"``: each topic lands as an Iceberg table, exactly once.

Real Spark (the session's shared local[2] JVM, with Iceberg's runtime), real brokers,
real files. Each test counts what was sent against what the table holds, read with
Spark SQL (and once with pyiceberg, without a JVM):

- N messages over two topics and several partitions land as N rows, each once, per
  partition in offset order, in hour partitions; the snapshot summary holds the
  offsets; a rerun lands nothing; more messages land only the new ones; time travel to
  the first load gives its rows; pyiceberg reads the table;
- a loader (its own process) killed as kill -9 would while Spark writes, then a rerun:
  each message once, the dead process's lock taken over; ``--maintain`` then leaves at
  most one file per hour with the rows unchanged, removes the killed write's files
  (orphans, once older than ``orphan_after_hours``), and loads go on from the offsets
  behind the compaction's snapshot;
- ``first_run = "latest"`` commits the starting offsets without rows;
- with dedup on, agent records published twice (in one load, and again in a later one)
  land once: the copies are counted, not appended, and the identities each load landed
  ride in its commit's summary next to the offsets;
- bad input: ``output.format`` misspelt, a warehouse that cannot be written: one line
  naming the key.

The same on a real HDFS is in test_hdfs_integration.py (it shares that module's HDFS).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from broker.client import Producer
from hadoop_loader import cli
from hadoop_loader.crash import CRASH_EXIT, ENV
from hadoop_loader.iceberg import DUPLICATE_HOURS, DUPLICATES, IDENTITIES, OFFSETS, table_location, table_name
from hadoop_loader.job import run_load, run_maintenance
from hadoop_loader.summary import print_summary
from tests.loader.conftest import (
    BASE_HOUR_MS,
    HOUR_MS,
    REPO,
    iceberg_jar,
    iceberg_spark_conf,
    loader_command,
    loader_config,
    produce,
    wait_visible,
    write_loader_toml,
)
from tests.loader.test_lake_integration import FID, agent_values, send
from tests.loader.test_load_integration import audit_records, merge

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`"),
]

NAMESPACE = "logferry"
ALL_HOURS = {"enabled": True, "settle_minutes": 0, "lookback_hours": 24 * 365 * 10}
"""The audit over every hour since the test messages' 2024 event times."""


def iceberg_config(zk: str, out: Path, topics: list[str], **sections: dict) -> Any:
    """A loader config landing Iceberg tables into the warehouse ``out``."""
    return loader_config(zk, out, topics, output={"format": "iceberg"}, **sections)


def table_rows(spark: Any, warehouse: str, topic: str, version: int | None = None) -> list[tuple]:
    """(partition, offset, index, value, timestamp) of every row, read with Spark SQL."""
    name = table_name(warehouse, NAMESPACE, topic)
    as_of = f" VERSION AS OF {version}" if version is not None else ""
    return [
        (r["partition"], r["offset"], r["index"], bytes(r["value"]), r["timestamp"])
        for r in spark.sql(f"SELECT partition, offset, index, value, timestamp FROM {name}{as_of}").collect()
    ]


def assert_table_exactly(spark: Any, warehouse: str, sent: dict[str, dict[int, list[tuple[bytes, int]]]]) -> None:
    """Each topic's table holds exactly the sent messages: each once, and per partition
    in the order sent when ordered by (offset, index), the identity of a message."""
    for topic, parts in sent.items():
        rows = table_rows(spark, warehouse, topic)
        ids = [(p, o, i) for p, o, i, *_ in rows]
        assert len(ids) == len(set(ids)), f"{topic}: duplicate rows"
        assert len(rows) == sum(len(m) for m in parts.values()), topic
        for partition, messages in parts.items():
            landed = sorted(r for r in rows if r[0] == partition)
            assert [r[3] for r in landed] == [v for v, _ in messages], f"{topic}/{partition} out of order"
            assert [int(r[4].timestamp() * 1000) for r in landed] == [ts for _, ts in messages]


def snapshot_summaries(spark: Any, warehouse: str, topic: str) -> list[dict[str, str]]:
    name = table_name(warehouse, NAMESPACE, topic)
    rows = spark.sql(f"SELECT summary FROM {name}.snapshots ORDER BY committed_at").collect()
    return [dict(r["summary"]) for r in rows]


def files_per_hour(spark: Any, warehouse: str, topic: str) -> dict[Any, int]:
    name = table_name(warehouse, NAMESPACE, topic)
    rows = spark.sql(f"SELECT partition, file_count FROM {name}.partitions").collect()
    return {r["partition"][0]: r["file_count"] for r in rows}


@pytest.mark.slow
def test_topics_land_as_tables_exactly_once(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    out = tmp_path / "wh"
    warehouse = out.as_uri()
    sent: dict = {}
    merge(sent, {"ice-a": produce(zk, "ice-a", 3, 3_000, hours=3), "ice-b": produce(zk, "ice-b", 1, 500)})
    with Producer(zk=zk) as producer:  # what agents would have counted: ice-b's first window 10 more
        producer.send("_audit", audit_records(sent, short_topic="ice-b"), partition=0).wait(30)
    config = iceberg_config(zk, out, ["ice-a", "ice-b"], audit=ALL_HOURS)

    first = run_load(config, spark=spark)
    assert first.rows == 3_500 and first.sequence == 1
    # the audit counts the tables (their manifests' record counts per hour partition)
    assert first.audit_error is None and first.audit is not None and first.audit.records > 0
    assert {(h.topic, h.hour): h.landed for h in first.audit.hours} == sent_per_hour(sent)
    low = first.audit.failing(0.9999)
    assert [(h.topic, h.hour, h.expected - h.landed) for h in low] == [("ice-b", "2024-03-01T00", 10)]
    assert first.topics["ice-a"].table == table_name(warehouse, NAMESPACE, "ice-a")
    assert_table_exactly(spark, warehouse, sent)
    summary = snapshot_summaries(spark, warehouse, "ice-a")[-1]
    assert summary["logferry.load"] == "1" and summary["added-records"] == "3000"
    ends = {r.partition: r.end for r in first.topics["ice-a"].ranges}
    assert summary[OFFSETS] == "{" + ",".join(f'"{p}":{e}' for p, e in sorted(ends.items())) + "}"

    unaudited = replace(config, audit=replace(config.audit, enabled=False))  # the test's time
    again = run_load(unaudited, spark=spark)  # nothing new: no commit
    assert again.sequence is None and again.rows == 0

    merge(sent, {"ice-a": produce(zk, "ice-a", 3, 600, start=3_000, hours=3)})
    second = run_load(unaudited, spark=spark)
    assert second.rows == 600 and second.topics["ice-a"].rows == 600 and second.sequence == 2
    # time travel to a given load: its snapshot as it was
    name = table_name(warehouse, NAMESPACE, "ice-a")
    as_of = spark.sql(f"SELECT count(*) FROM {name} VERSION AS OF {first.topics['ice-a'].snapshot_id}")
    assert as_of.collect()[0][0] == 3_000

    # a quick look without a JVM: pyiceberg reads the table from its metadata file
    static = pytest.importorskip("pyiceberg.table").StaticTable
    location = Path(table_location(str(out), NAMESPACE, "ice-a")) / "metadata"
    version = (location / "version-hint.text").read_text().strip()
    arrow = static.from_metadata(str(location / f"v{version}.metadata.json")).scan().to_arrow()
    assert arrow.num_rows == 3_600 and {"partition", "offset", "index", "timestamp"} <= set(arrow.column_names)
    # columns unique per row are written without a dictionary, as in the Parquet lake
    data_file = next((location.parent / "data").rglob("*.parquet"))
    meta = pq.read_metadata(data_file).row_group(0)
    chunks = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert not chunks["value"].has_dictionary_page and not chunks["offset"].has_dictionary_page
    assert chunks["partition"].has_dictionary_page

    merge(sent, {"ice-a": produce(zk, "ice-a", 3, 300, start=3_600, hours=3)})
    third = run_load(config, spark=spark)
    assert third.rows == 300 and third.topics["ice-b"].rows == 0
    assert_table_exactly(spark, warehouse, sent)
    # what the tables hold now, not what the run landed: every load's rows per hour
    assert {(h.topic, h.hour): h.landed for h in third.audit.hours} == sent_per_hour(sent)


def sent_per_hour(sent: dict[str, dict[int, list[tuple[bytes, int]]]]) -> dict[tuple[str, str], int]:
    """Messages sent per (topic, UTC event hour ``YYYY-MM-DDTHH``), counted here."""
    out: dict[tuple[str, str], int] = {}
    for topic, parts in sent.items():
        for messages in parts.values():
            for _, ts in messages:
                key = (topic, time.strftime("%Y-%m-%dT%H", time.gmtime(ts / 1000)))
                out[key] = out.get(key, 0) + 1
    return out


def test_first_run_latest_commits_the_starting_offsets_without_rows(spark, broker_cluster, tmp_path):
    """A partition that starts at ``latest`` must record where it started (an empty
    commit carrying the offsets), or the next run would skip what came in between."""
    zk = broker_cluster(1).zk_connect
    produce(zk, "ice-late", 2, 400)
    out = tmp_path / "wh"
    config = iceberg_config(zk, out, ["ice-late"], load={"first_run": "latest"})
    first = run_load(config, spark=spark)
    assert first.sequence == 1 and first.rows == 0
    later = produce(zk, "ice-late", 2, 200, start=400)
    second = run_load(config, spark=spark)
    assert second.rows == 200
    assert_table_exactly(spark, out.as_uri(), {"ice-late": later})


def metadata_versions(metadata: Path) -> list[int]:
    """The Hadoop catalog's metadata versions present (``vN.metadata.json``), ascending."""
    return sorted(int(p.name[1:].split(".")[0]) for p in metadata.glob("v*.metadata.json"))


def test_a_catalog_that_lost_a_commit_is_one_line_and_the_next_run_lands_nothing_twice(
    spark, broker_cluster, tmp_path, capsys
):
    """The Hadoop catalog's pointer (``version-hint.text``) left behind the newest commit
    (a restore from an older copy) is caught up by Iceberg, which reads ahead: the next
    run lands only what is new. The newest commit's metadata file itself lost: the run
    stops with one line naming it, exit 1, nothing written; once the pointer names the
    commit before it (the operator's repair the line asks for), the run lands the lost
    load's messages again, each once, as that commit no longer holds them."""
    zk = broker_cluster(1).zk_connect
    out = tmp_path / "wh"
    config_file = write_loader_toml(
        tmp_path / "loader.toml", zk, out, ["ice-lost"], output='format = "iceberg"', spark_conf=iceberg_spark_conf()
    )
    sent: dict = {}
    merge(sent, {"ice-lost": produce(zk, "ice-lost", 2, 1_000, hours=2)})
    assert cli.main(["load", "--config", str(config_file)]) == 0
    metadata = Path(table_location(str(out), NAMESPACE, "ice-lost")) / "metadata"
    hint = metadata / "version-hint.text"

    merge(sent, {"ice-lost": produce(zk, "ice-lost", 2, 500, start=1_000, hours=2)})
    stale = hint.read_text()
    assert cli.main(["load", "--config", str(config_file)]) == 0
    hint.write_text(stale)  # the pointer one commit behind
    merge(sent, {"ice-lost": produce(zk, "ice-lost", 2, 200, start=1_500, hours=2)})
    assert cli.main(["load", "--config", str(config_file)]) == 0
    assert_table_exactly(spark, out.as_uri(), sent)

    newest = metadata_versions(metadata)[-1]
    (metadata / f"v{newest}.metadata.json").unlink()  # the last load's commit, lost
    merge(sent, {"ice-lost": produce(zk, "ice-lost", 2, 100, start=1_700, hours=2)})
    capsys.readouterr()
    assert cli.main(["load", "--config", str(config_file)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logferry load: error: "), lines
    assert f"v{newest}.metadata.json" in lines[0] or f"version {newest}" in lines[0], lines[0]
    assert metadata_versions(metadata)[-1] == newest - 1, "the failed run committed"

    hint.write_text(f"{newest - 1}\n")
    assert cli.main(["load", "--config", str(config_file)]) == 0
    assert_table_exactly(spark, out.as_uri(), sent)  # the lost load's 200 again, and the 100


@pytest.mark.slow
def test_records_published_twice_land_once_with_dedup_on(spark, broker_cluster, tmp_path):
    """The dedup of Parquet runs (:func:`hadoop_loader.dedup.mark_duplicates`) on a
    table: its state is the identity ranges in the landing snapshots' summaries."""
    zk = broker_cluster(1).zk_connect
    topic = "ice-dedup"
    produce(zk, topic, 2, 0)  # creates the topic
    t0, t1 = BASE_HOUR_MS + 60_000, BASE_HOUR_MS + HOUR_MS + 60_000
    # lines 0-999; the agent restarts and sends 500-999 again and 1000-1499; a copy of
    # 700-799 reaches the other partition (a stage that re-sent on a move)
    send(zk, topic, 0, agent_values(0, 1000, t0), t0)
    send(zk, topic, 0, agent_values(500, 1500, t1), t1)
    send(zk, topic, 1, agent_values(700, 800, t1), t1)
    wait_visible(zk, topic)
    out = tmp_path / "wh"
    config = iceberg_config(
        zk, out, [topic], source={"decode_agent_records": True}, dedup={"enabled": True}, audit=ALL_HOURS
    )
    warehouse, name = out.as_uri(), table_name(out.as_uri(), NAMESPACE, topic)

    def landed() -> list[tuple[int, int]]:
        rows = spark.sql(f"SELECT file_id, file_offset FROM {name} WHERE partition < 99").collect()
        return sorted((r["file_id"], r["file_offset"]) for r in rows)

    first = run_load(config, spark=spark)
    assert (first.rows, first.duplicates) == (1_500, 600)
    assert {r.partition: r.duplicates for r in first.topics[topic].ranges} == {0: 500, 1: 100}
    text = io.StringIO()
    print_summary(first, text)
    assert f"{topic}: 1,500 rows" in text.getvalue() and "600 duplicate(s) dropped" in text.getvalue()
    assert landed() == [(FID, i * 100) for i in range(1_500)]
    summary = snapshot_summaries(spark, warehouse, topic)[-1]
    assert summary[DUPLICATES] == "600" and summary["added-records"] == "1500"
    assert json.loads(summary[IDENTITIES]) == [["web-1", FID, 0, 149_900]]
    # the copies per event hour (all in the second hour), which the audit reads
    assert json.loads(summary[DUPLICATE_HOURS]) == {str(t1 // HOUR_MS): 600}
    hours = {h.hour: (h.landed, h.duplicates) for h in first.audit.hours}
    assert hours == {"2024-03-01T00": (1_000, 0), "2024-03-01T01": (500, 600)}, hours

    # another writer appends (a backfill row; its snapshot carries no logferry state)...
    spark.sql(f"INSERT INTO {name} (partition, offset, index, timestamp) VALUES (99, 0, 0, TIMESTAMP '2024-03-01')")
    # ...then a later load: copies of landed lines (1200-1499), found through the first
    # load's summary behind the other writer's snapshot, and new ones (1500-1599)
    send(zk, topic, 0, agent_values(1200, 1600, t1 + 60_000), t1 + 60_000)
    wait_visible(zk, topic)
    second = run_load(config, spark=spark)
    assert (second.rows, second.duplicates) == (100, 300)
    assert landed() == [(FID, i * 100) for i in range(1_600)]
    assert json.loads(snapshot_summaries(spark, warehouse, topic)[-1][IDENTITIES]) == [["web-1", FID, 150_000, 159_900]]


def crashing_run(config: Path, point: str) -> subprocess.CompletedProcess:
    argv, env = loader_command(config)
    env[ENV] = point
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_loader_then_rerun_lands_each_message_once(spark, broker_cluster, tmp_path):
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    out = tmp_path / "wh"
    config_file = write_loader_toml(
        tmp_path / "loader.toml", zk, out, ["ice-crash"], output='format = "iceberg"', spark_conf=iceberg_spark_conf()
    )
    sent: dict = {}
    merge(sent, {"ice-crash": produce(zk, "ice-crash", 2, 20_000, hours=2)})
    config = iceberg_config(zk, out, ["ice-crash"])
    first = run_load(config, spark=spark)
    assert first.rows == 20_000

    merge(sent, {"ice-crash": produce(zk, "ice-crash", 2, 4_000, start=20_000, hours=2)})
    killed = crashing_run(config_file, "during-write")  # as kill -9 while Spark writes: no commit
    assert killed.returncode == CRASH_EXIT, killed.stderr[-3000:]
    data = Path(table_location(str(out), NAMESPACE, "ice-crash")) / "data"
    assert len(list(data.rglob("*.parquet"))) > 2  # the first load's two files, and the killed write's...
    assert (out / "_logferry" / "lock").exists()  # ...and its lock, left behind

    merge(sent, {"ice-crash": produce(zk, "ice-crash", 2, 1_000, start=24_000, hours=2)})
    final = run_load(config, spark=spark)  # takes over the dead process's lock
    assert final.rows == 5_000
    warehouse = out.as_uri()
    assert_table_exactly(spark, warehouse, sent)
    assert [s["logferry.load"] for s in snapshot_summaries(spark, warehouse, "ice-crash")] == ["1", "2"]

    live = set(spark.sql(f"SELECT file_path FROM {table_name(warehouse, NAMESPACE, 'ice-crash')}.files").collect())
    orphans = [p for p in data.rglob("*.parquet") if not any(str(p) in r[0] for r in live)]
    assert orphans, "the killed write left no data file"
    aged = time.time() - 100 * 3600  # older than maintenance.orphan_after_hours (72)
    for path in orphans:
        os.utime(path, (aged, aged))

    # --maintain: one file per hour (two loads wrote two), the killed write's files gone
    before = files_per_hour(spark, warehouse, "ice-crash")
    assert len(before) == 2 and max(before.values()) == 2  # hours(timestamp): 2 hours, a file per load and hour
    upkeep = run_maintenance(config, spark=spark).tables["ice-crash"]
    small = [n for n in before.values() if n > 1]
    assert (upkeep.rewritten_files, upkeep.added_files) == (sum(small), len(small))
    assert upkeep.orphans_removed == len(orphans)
    assert set(files_per_hour(spark, warehouse, "ice-crash").values()) == {1}
    assert not any(p.exists() for p in orphans)
    assert_table_exactly(spark, warehouse, sent)  # compaction kept every row, once

    merge(sent, {"ice-crash": produce(zk, "ice-crash", 2, 500, start=25_000, hours=2)})
    assert run_load(config, spark=spark).rows == 500  # offsets found behind the compaction's snapshot
    assert_table_exactly(spark, warehouse, sent)


def test_bad_format_and_unwritable_warehouse_are_one_line_naming_the_key(tmp_path):
    config_file = tmp_path / "loader.toml"
    write_loader_toml(config_file, "127.0.0.1:1/x", tmp_path / "wh", ["t"], output='format = "iceburg"')
    argv, env = loader_command(config_file)
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "output.format" in lines[0] and "iceburg" in lines[0], result.stderr

    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    write_loader_toml(config_file, "127.0.0.1:1/x", a_file / "wh", ["t"], output='format = "iceberg"')
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "output.uri" in lines[0] and "nothing was written" in lines[0], result.stderr
