"""The console's landed tier of an Iceberg lake on a real HDFS, read over WebHDFS.

Real parts: a broker, the real loader landing a topic as an Iceberg table into a real
HDFS (Hadoop's NameNode and DataNode, tests/support/hdfs.py; Spark local mode with
Iceberg's runtime), ``logferry load --maintain`` compacting each hour's two files into
one and expiring the first load's snapshot, and ``logferry console`` reading the table's
metadata over the NameNode's WebHDFS. What the agents would have published (the audit
records of what the test sent) is the tier before landed.

The console's ``/api/snapshot`` shows, per event hour, exactly the rows the test sent in
that hour, 100% of the agents' count, judged (settled); a second lake whose WebHDFS
address answers nothing shows one line naming it, and the first lake is read all the same.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.request
from pathlib import Path

import pytest
import tomli_w

from broker.client import Producer
from broker.common.lake import hour_key
from hadoop_loader.job import run_load, run_maintenance
from tests.console.browser import ConsoleProcess
from tests.loader.conftest import iceberg_jar, loader_config, produce, spark  # noqa: F401
from tests.loader.test_load_integration import audit_records
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(iceberg_jar() is None, reason="no Apache Iceberg runtime: run `make iceberg-jars`"),
]


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url + "api/snapshot", timeout=5) as answer:  # noqa: S310 (the test's console)
        return json.loads(answer.read())


def per_hour(sent: dict[int, list[tuple[bytes, int]]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for messages in sent.values():
        for _, ts in messages:
            key = hour_key(ts, dt.UTC)
            out[key] = out.get(key, 0) + 1
    return out


# ruff: noqa: F811 (the spark fixture, imported above, is a parameter)
# A worker's first Spark job with Iceberg's runtime, three more (a second load, the
# rewrite, the expiry) and the module's HDFS: 77 s alone, 300 s in a full run that had
# two suites on the machine at once; the loader's Iceberg tests have the same headroom.
@pytest.mark.timeout(600)
def test_iceberg_lake_on_hdfs_shows_each_hours_rows_against_the_agents(
    spark, module_cluster, unique_name, hdfs, hdfs_dir, tmp_path: Path
):
    zk, topic = module_cluster.zk_connect, unique_name("ice-console")
    sent = produce(zk, topic, 2, 2_000, hours=3)
    config = loader_config(zk, tmp_path, [topic], output={"uri": hdfs_dir, "format": "iceberg"})
    assert run_load(config, spark=spark).rows == 2_000
    later = produce(zk, topic, 2, 600, start=2_000, hours=3, create=False)  # the last hour's
    for partition, messages in later.items():
        sent[partition] += messages
    assert run_load(config, spark=spark).rows == 600  # a second file in the last hour
    # compaction (the last hour's two files into one: the two DELETED in the rewrite's
    # manifest) and expiry of every snapshot older than the newest load's (the first load's)
    maintained = run_maintenance(
        loader_config(
            zk,
            tmp_path,
            [topic],
            output={"uri": hdfs_dir, "format": "iceberg"},
            maintenance={"expire_after_hours": 0},
        ),
        spark=spark,
    )
    upkeep = maintained.tables[topic]
    assert (upkeep.rewritten_files, upkeep.added_files, upkeep.expired_snapshots) == (2, 1, 1), upkeep
    with Producer(zk=zk) as producer:  # what the agents would have counted
        producer.send("_audit", audit_records({topic: sent}), partition=0).wait(30)

    console_toml = tmp_path / "console.toml"
    console_toml.write_text(
        tomli_w.dumps(
            {
                "cluster": [{"name": "live", "zk_connect": zk}],
                "lake": [
                    {"name": "hdfs", "path": hdfs_dir, "webhdfs": f"http://{hdfs.http_address}", "format": "iceberg"},
                    {"name": "gone", "path": hdfs_dir, "webhdfs": f"http://127.0.0.1:{free_port()}"},
                ],
            }
        )
    )
    console = ConsoleProcess(interval=0.5, extra=["--config", str(console_toml)])
    expected = per_hour(sent)
    try:

        def shown() -> dict | None:
            lakes = {lake["name"]: lake for lake in snapshot(console.url)["landed"]}
            lake = lakes.get("hdfs")
            rows = [r for r in (lake or {}).get("rows", []) if r["topic"] == topic]
            ready = rows and all(r["expected"] for r in rows) and lakes["gone"]["error"]
            return lakes if ready else None

        lakes = wait_until(shown, 30, "the Iceberg lake's landed tier on /api/snapshot")
        lake = lakes["hdfs"]
        assert (lake["format"], lake["tables"], lake["error"]) == ("iceberg", 1, None), lake
        assert lake["runs"] == 2 and 0 < lake["last_started_ms"] < lake["last_committed_ms"], lake
        rows = {r["hour"]: r for r in lake["rows"] if r["topic"] == topic}
        assert {h: r["landed"] for h, r in rows.items()} == expected
        assert len(expected) == 3 and sum(expected.values()) == 2_600
        for row in rows.values():
            assert (row["of"], row["expected"], row["complete_pct"], row["state"]) == (
                "agent",
                row["landed"],
                100.0,
                "settled",  # March 2024 ended long before the loads started
            ), row
        error = lakes["gone"]["error"]
        assert error.startswith("cannot reach WebHDFS at http://127.0.0.1:") and hdfs_dir.split("/", 3)[3] in error
        assert "\n" not in error and lakes["gone"]["rows"] == []
    finally:
        assert console.stop() == 0, "".join(console.stderr)
