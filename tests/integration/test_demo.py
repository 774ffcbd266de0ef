"""`logferry demo` at a reduced size: the whole pipeline counts exactly, and nothing is left running.

Real ZooKeeper, real broker processes (etc/live, etc/analysis), real agents, the real
mirror and the real Spark landing job, all started by the demo from the configs in etc/.
"""

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(330)]


def _ints(row: str) -> list[int]:
    return [int(x.replace(",", "")) for x in re.findall(r"[\d,]*\d", row)]


@pytest.mark.slow
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

    # Per stage: lines, written by hosts, shipped (audit), live, analysis, Parquet rows.
    total = re.search(r"^total\s+(.*)$", out, re.M)
    assert total, out
    lines, written, shipped, live, analysis, parquet = _ints(total.group(1))
    assert written > 0 and lines > written  # stack traces: several lines, one record
    assert written == shipped == live == analysis == parquet, total.group(0)
    assert "RESULT: OK" in out

    # The audit: 100% for every topic the agents published.
    completeness = re.findall(r"^\s+(\S+)\s+[\d,]+ /\s+[\d,]+\s+complete: (\S+)$", out, re.M)
    assert completeness and all(pct == "100.00%" for _, pct in completeness), completeness

    # The Parquet files hold exactly the lines written (counted here, independently).
    import pyarrow.parquet as pq

    files = [p for p in (workdir / "warehouse").rglob("*.parquet") if "_logferry" not in p.parts]
    assert files
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in files) == written
    assert (workdir / "query.py").exists() and str(workdir / "query.py") in out

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

    # The console shows the landed tier: every topic's rows, 100% of what the mirror copied
    # (the hosts stopped before the loader ran, so every hour is whole).
    landed = re.search(r"console: landed tier shown, 1 loader run\(s\): (.*)$", out, re.M)
    assert landed, out
    per_topic = re.findall(r"(\S+) ([\d,]+) rows \(([^)]*) of mirror\)", landed.group(1))
    assert sorted(topic for topic, _, _ in per_topic) == sorted(t for t, _ in completeness), landed.group(0)
    assert all(pcts == "100.00%" for _, _, pcts in per_topic), landed.group(0)
    assert sum(int(rows.replace(",", "")) for _, rows, _ in per_topic) == written, landed.group(0)
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
