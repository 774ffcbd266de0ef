"""`logferry demo` at a reduced size: the whole pipeline counts exactly, and nothing is left running.

Real ZooKeeper, real broker processes (etc/live, etc/analysis), real agents, the real
mirror, a real HDFS (Hadoop's NameNode and DataNode) and the real Spark landing job into
an Iceberg table per topic on it, all started by the demo from the configs in etc/. This
is the one test of the demo's default lake (HDFS + Iceberg: about 20-60 s more of JVMs),
whose tables the console's landed tier reads over WebHDFS; test_demo_keep_running.py runs
the demo with `--lake file` (local Parquet) and checks the landed tier of that lake. An
HDFS that fails to start ends the demo with one line and stops everything it started.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker.testing.hdfs import JARS as HADOOP_JARS
from broker.testing.iceberg_jars import JARS as ICEBERG_JARS
from broker.testing.iceberg_jars import RUNTIME_JAR
from demo.lake import missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(330)]


def _ints(row: str) -> list[int]:
    return [int(x.replace(",", "")) for x in re.findall(r"[\d,]*\d", row)]


@pytest.mark.slow
@pytest.mark.skipif(missing("hdfs") is not None, reason=str(missing("hdfs")))  # as the other HDFS tests
def test_demo_every_stage_counts_what_the_hosts_wrote(tmp_path):
    workdir = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker",
            "demo",
            "--seconds",
            "6",
            "--rate",
            "400",
            "--rotate-every",
            "2",
            "--audit-window",
            "2",
            "--workdir",
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=320,
        stdin=subprocess.DEVNULL,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr

    # Per stage: lines, written by hosts, shipped (audit), live, analysis, Iceberg rows
    # (each table's current snapshot, read by the demo from its metadata on HDFS).
    assert re.search(r"^topic\s.*\sIceberg rows$", out, re.M), out
    total = re.search(r"^total\s+(.*)$", out, re.M)
    assert total, out
    lines, written, shipped, live, analysis, landed = _ints(total.group(1))
    assert written > 0 and lines > written  # stack traces: several lines, one record
    assert written == shipped == live == analysis == landed, total.group(0)
    assert "RESULT: OK" in out

    # The audit: 100% for every topic the agents published.
    completeness = re.findall(r"^\s+(\S+)\s+[\d,]+ /\s+[\d,]+\s+complete: (\S+)$", out, re.M)
    assert completeness and all(pct == "100.00%" for _, pct in completeness), completeness

    # The lake: an Iceberg table per topic on the demo's own HDFS, its location and a
    # Spark SQL query in the report; the loader's own audit counted the tables, every
    # hour of every topic 100%.
    uri = re.search(r"^\[demo\] HDFS: (hdfs://127\.0\.0\.1:\d+) \(NameNode pid", out, re.M)
    assert uri, out
    for topic, _ in completeness:
        assert f"  logferry.{topic}: {uri.group(1)}/warehouse/logferry/{topic}  (" in out, topic
    assert "SELECT host, count(*) AS records FROM demo.logferry.`" in out and "spark-sql --jars " in out
    loader_audit = re.findall(r"^  \| +agent +(\S+) +\S+ +([\d,]+) +([\d,]+) .* (\S+%)", out, re.M)
    assert sorted({t for t, *_ in loader_audit}) == sorted(t for t, _ in completeness), out
    assert all(expected == rows and pct == "100.00%" for _, expected, rows, pct in loader_audit), loader_audit
    loader_toml = (workdir / "config" / "loader.toml").read_text()
    assert 'format = "iceberg"' in loader_toml and f'uri = "{uri.group(1)}/warehouse"' in loader_toml
    assert (workdir / "query.py").exists() and str(workdir / "query.py") in out
    assert (workdir / "hdfs" / "logs" / "namenode.log").exists()

    # Rotation happened while the agents tailed.
    assert list((workdir / "hosts" / "web-1").rglob("*.log.1"))

    # It ran secured: TLS + SCRAM required, ACLs on, each component its own principal.
    assert "security: TLS+SCRAM" in out and "(secured: TLS+SCRAM, ACLs)" in out
    broker_config = (workdir / "config" / "live-broker-1.toml").read_text()
    assert "[auth]" in broker_config and "[authorizer]" in broker_config
    logs = {p.name: p.read_text() for p in (workdir / "logs").glob("*broker*.log")}
    live = "".join(text for name, text in logs.items() if name.startswith("live"))
    analysis = "".join(text for name, text in logs.items() if name.startswith("analysis"))
    for user in ("agent", "mirror", "dashboard"):
        assert f"first connection of User:{user} " in live, user
    for user in ("mirror", "loader"):
        assert f"first connection of User:{user} " in analysis, user
    secrets = list((workdir / "security" / "secrets").glob("*.password"))
    assert secrets and all(p.stat().st_mode & 0o077 == 0 for p in secrets)
    every_log = out + "".join(p.read_text() for p in (workdir / "logs").glob("*.log"))
    assert not [p.name for p in secrets if p.read_text().strip() in every_log]

    # Its web console served the page and read both clusters as User:reader.
    assert re.search(r"^\[demo\] console: serving http://127\.0\.0\.1:\d+/: live ok .*analysis ok", out, re.M), out
    # Its landed tier read the Iceberg tables on HDFS (over the NameNode's WebHDFS): every
    # topic's rows, 100% of what the mirror copied (the hosts stopped before the loader ran).
    shown = re.search(r"^\[demo\] console: landed tier shown, 1 loader run\(s\): (.*)$", out, re.M)
    assert shown, out
    per_topic = re.findall(r"(\S+) ([\d,]+) rows \(([^)]*) of mirror\)", shown.group(1))
    assert per_topic and all(pcts == "100.00%" for _, _, pcts in per_topic), shown.group(0)
    assert sum(int(rows.replace(",", "")) for _, rows, _ in per_topic) == landed, shown.group(0)
    assert "stopped every process it started" in out
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "demo left processes running"


def test_demo_refuses_a_workdir_it_did_not_make(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "demo", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert "not made by the demo" in proc.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.timeout(180)
def test_hdfs_failing_to_start_is_one_line_and_stops_everything(tmp_path: Path) -> None:
    """Hadoop's jar folder says it is complete but holds no jar: the NameNode cannot
    start. The demo, which had started ZooKeeper and the brokers meanwhile, ends with
    one line naming the logs and exit 1, and nothing it started keeps running."""
    cache = tmp_path / "jars"
    for jars in (HADOOP_JARS, ICEBERG_JARS):
        folder = cache / f"{jars.name}-{jars.version}"
        folder.mkdir(parents=True)
        (folder / ".resolved").write_text(jars.version)
    (cache / f"{ICEBERG_JARS.name}-{ICEBERG_JARS.version}" / RUNTIME_JAR).write_bytes(b"not a jar")
    workdir = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "demo", "--insecure", "--seconds", "4", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=170,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, LOGFERRY_BENCH_CACHE=str(cache)),
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    failed = [line for line in out.splitlines() if "FAILED" in line]
    assert failed == [
        f"[demo] FAILED: HDFS did not start: formatting the NameNode in {workdir / 'hdfs' / 'name'} failed (exit 1) "
        f"(logs in {workdir / 'hdfs' / 'logs'})"
    ], out
    assert "live broker" in out and "stopped every process it started" in out
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "demo left processes running"
