"""The demo's lake without processes (demo/lake.py, demo/query.py, demo/configs.py):
the loader config it writes for Iceberg on HDFS is one the loader accepts (with its
audit on), a table's counts come from its metadata file, the query script compiles,
missing jars and a failed HDFS start are each one line naming what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.testing.hdfs import HdfsStartError, LocalHdfs
from demo import configs, lake
from demo.lake import HdfsLake, missing, snapshot_counts
from demo.processes import DemoError
from demo.query import iceberg_where, sql_example, write_iceberg_query, write_parquet_query
from hadoop_loader.config import config_from_dict

TOPICS = ["app-logs", "access-logs"]


def test_the_iceberg_loader_config_is_the_examples_with_the_lake_changed(tmp_path: Path) -> None:
    doc = configs.loader_config(configs.load(configs.loader_template()), "h:1/a", tmp_path / "wh", TOPICS)
    jar = tmp_path / "iceberg-spark-runtime.jar"
    doc = configs.land_as_iceberg(doc, "hdfs://127.0.0.1:9/warehouse", jar)
    config = config_from_dict(doc, "loader.toml")  # the loader's own validation
    assert (config.output.format, config.output.uri) == ("iceberg", "hdfs://127.0.0.1:9/warehouse")
    assert config.spark.conf["spark.jars"] == str(jar)
    assert config.audit.enabled and config.dedup.enabled  # the audit counts the tables now
    assert "files_per_hour" not in doc["output"]  # Parquet's: Iceberg's writer decides files


def test_a_tables_rows_and_files_come_from_its_current_snapshot() -> None:
    meta = {
        "current-snapshot-id": 2,
        "snapshots": [
            {"snapshot-id": 1, "summary": {"total-records": "10", "total-data-files": "1"}},
            {"snapshot-id": 2, "summary": {"total-records": "25", "total-data-files": "3"}},
        ],
    }
    assert snapshot_counts(meta) == (25, 3)
    assert snapshot_counts({"current-snapshot-id": -1, "snapshots": []}) == (0, 0)


def test_the_query_scripts_compile_and_name_the_warehouse(tmp_path: Path) -> None:
    jar = tmp_path / "runtime.jar"
    script = write_iceberg_query(tmp_path, "hdfs://127.0.0.1:9/warehouse", "logferry", TOPICS, jar)
    text = script.read_text()
    compile(text, str(script), "exec")
    assert "hdfs://127.0.0.1:9/warehouse" in text and str(jar) in text
    assert "demo.logferry.`app-logs`" in text and "demo.logferry.`access-logs`" in text
    compile(write_parquet_query(tmp_path, tmp_path / "wh", TOPICS).read_text(), "q", "exec")
    assert sql_example("logferry", "app-logs") == (
        "SELECT host, count(*) AS records FROM demo.logferry.`app-logs` GROUP BY host ORDER BY host"
    )


def test_the_report_gives_each_tables_hdfs_location_and_a_spark_sql_command(tmp_path: Path) -> None:
    hdfs_lake = HdfsLake(tmp_path)
    hdfs_lake.hdfs = LocalHdfs(tmp_path / "hdfs", 9, 10)
    lines = iceberg_where(hdfs_lake, TOPICS, {"app-logs": 2}, "q.py", ".venv/bin/python", "logferry", Path("r.jar"))
    text = "\n".join(lines)
    assert "  logferry.app-logs: hdfs://127.0.0.1:9/warehouse/logferry/app-logs  (2 data file(s))" in lines
    assert "http://127.0.0.1:10/" in text and f"logferry hdfs start --data-dir {tmp_path / 'hdfs'}" in text
    assert "/bin/spark-sql --jars r.jar" in text and "SPARK_HOME=" in text
    assert "warehouse=hdfs://127.0.0.1:9/warehouse" in text


def test_missing_jars_are_one_line_saying_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGFERRY_BENCH_CACHE", str(tmp_path))  # no jars there
    assert missing("file") is None
    reason = missing("hdfs")
    assert reason is not None and "\n" not in reason
    assert "Apache Hadoop" in reason and "make hadoop-jars" in reason and reason.endswith("--lake file")


def test_a_failed_start_is_one_line_naming_the_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(data_dir: Path, timeout: float, **kwargs: object) -> LocalHdfs:
        raise HdfsStartError("the namenode exited with code 1 while starting", None, "a long\nlog tail")

    monkeypatch.setattr(lake, "start_on_free_ports", fail)
    hdfs_lake = HdfsLake(tmp_path)
    hdfs_lake.start()
    with pytest.raises(DemoError) as info:
        hdfs_lake.wait(10)
    assert str(info.value) == (
        f"HDFS did not start: the namenode exited with code 1 while starting (logs in {tmp_path / 'hdfs' / 'logs'})"
    )
    assert hdfs_lake.stop() == []
    hdfs_lake.failure()  # stopping: the start's failure is no news any more
