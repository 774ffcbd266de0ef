"""`logferry demo --keep-running --zk-ensemble 3 --lake file`: the pipeline keeps flowing, survives a
broker's death and ZooKeeper's leader's, serves metrics, and Ctrl-C stops everything with
exit 0.

Real ZooKeeper, brokers, agents, mirror and Spark loader, at the reduced size of
test_demo.py; after the report the demo keeps the hosts writing and the agents
shipping. Here: a `consume --follow` sees new records; a live broker is killed with
SIGKILL and the demo says so and stays up; the ZooKeeper ensemble's leader is killed too;
records still arrive; the broker comes back
on SIGUSR1; the metrics endpoints answer; SIGINT ends it with exit 0 and nothing left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _wait_for(what: str, check: Callable[[], object], timeout: float, proc: subprocess.Popen, out: Path) -> object:
    """Poll ``check`` until truthy; fail with the demo's output if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the demo exited ({proc.returncode}) waiting for {what}:\n{out.read_text()[-6000:]}")
        time.sleep(0.5)
    pytest.fail(f"no {what} within {timeout:.0f}s:\n{out.read_text()[-6000:]}")


def _follow(zk: str, topic: str, path: Path, auth: list[str]) -> subprocess.Popen:
    """``logferry consume --follow`` with ``auth``: the TLS and SCRAM options the secured
    demo's guide exports as ``$LIVE_AUTH``."""
    out = path.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "broker", "consume", topic, "--from", "latest", "--follow", "--zk", zk, *auth],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        out.close()


def _grows(path: Path, timeout: float) -> bool:
    """True when ``path`` gets new bytes within ``timeout`` seconds."""
    start = path.stat().st_size if path.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > start:
            return True
        time.sleep(0.5)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _zookeeper_leader(zk_dir: Path) -> int:
    """The pid of the ensemble member that says it leads (``srvr``)."""
    from broker.testing.zkensemble import LocalEnsemble

    ensemble = LocalEnsemble.from_data_dir(zk_dir)
    assert ensemble is not None and len(ensemble.members) == 3, f"no ensemble in {zk_dir}"
    leaders = [m.pid for m, mode in zip(ensemble.members, ensemble.modes(), strict=True) if mode == "leader"]
    assert len(leaders) == 1 and leaders[0], f"one leader among {ensemble.modes()}"
    return leaders[0]


def _assert_parquet_lake(text: str, workdir: Path) -> None:
    """``--lake file``: the Parquet files hold exactly what the hosts wrote (counted here
    from their footers), and the console shows the landed tier: every topic's rows, 100%
    of what the mirror copied (the hosts stopped before the loader ran: every hour whole)."""
    import pyarrow.parquet as pq

    total = re.search(r"^total\s+(.*)$", text, re.M)
    assert total and re.search(r"^topic\s.*\sParquet rows$", text, re.M), text
    written = int(re.findall(r"[\d,]*\d", total.group(1))[1].replace(",", ""))
    files = [p for p in (workdir / "warehouse").rglob("*.parquet") if "_logferry" not in p.parts]
    assert files and sum(pq.ParquetFile(p).metadata.num_rows for p in files) == written
    landed = re.search(r"console: landed tier shown, 1 loader run\(s\): (.*)$", text, re.M)
    assert landed, text
    per_topic = re.findall(r"(\S+) ([\d,]+) rows \(([^)]*) of mirror\)", landed.group(1))
    assert per_topic and all(pcts == "100.00%" for _, _, pcts in per_topic), landed.group(0)
    assert sum(int(rows.replace(",", "")) for _, rows, _ in per_topic) == written, landed.group(0)


@pytest.mark.slow
def test_keep_running_flows_survives_a_broker_and_stops_clean(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    out = tmp_path / "demo.out"
    started = time.monotonic()
    with out.open("wb") as sink:
        demo = subprocess.Popen(
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
                "--keep-running",
                "--keep-rate",
                "40",
                "--zk-ensemble",
                "3",
                "--lake",
                "file",  # local Parquet: the console's landed tier (test_demo.py runs HDFS + Iceberg)
                "--workdir",
                str(workdir),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    consumers: list[subprocess.Popen] = []
    try:
        _wait_for("keep-running guide", lambda: "Press Ctrl-C" in out.read_text(), 360, demo, out)
        text = out.read_text()
        assert "RESULT: OK" in text  # the measured run is unchanged
        _assert_parquet_lake(text, workdir)
        zk = re.search(r"export LOGFERRY_ZK=(\S+)", text).group(1)
        auth = re.search(r'export LIVE_AUTH="([^"]+)"', text)
        assert auth, "the secured demo's guide exports the reader's TLS and SCRAM options"
        auth_args = auth.group(1).split()
        brokers = {int(m.group(2)): int(m.group(1)) for m in re.finditer(r"kill -9 (\d+)\s+# live broker (\d+)", text)}
        assert len(brokers) >= 2, text
        metrics = dict(re.findall(r"^  (live broker \d|agent web-1|mirror)\s+(http://\S+/metrics)", text, re.M))
        assert {"live broker 1", "agent web-1", "mirror"} <= set(metrics), text
        print(f"demo up with --keep-running after {time.monotonic() - started:.0f}s")

        # The pipeline flows: a consumer started now sees records the hosts write now.
        before = tmp_path / "before.out"
        consumers.append(_follow(zk, "app-logs", before, auth_args))
        assert _grows(before, 60), f"consume --follow printed nothing:\n{before.read_text()}"

        # A broker dies: the demo says so and stays up, the rest keeps flowing.
        victim, survivor = max(brokers), min(brokers)
        os.kill(brokers[victim], signal.SIGKILL)
        _wait_for(
            "the broker's death reported",
            lambda: re.search(
                rf"live broker {victim} \(pid {brokers[victim]}\) exited with code -9 \(SIGKILL\); "
                rf"the live cluster continues with broker {survivor}",
                out.read_text(),
            ),
            30,
            demo,
            out,
        )
        # ZooKeeper's leader dies too (an ensemble of three: two keep the quorum).
        assert zk.count(",") == 2, f"the demo's connect string names the three members: {zk}"
        zk_leader = _zookeeper_leader(workdir / "zookeeper")
        os.kill(zk_leader, signal.SIGKILL)
        after = tmp_path / "after.out"
        consumers.append(_follow(zk, "app-logs", after, auth_args))
        assert _grows(after, 120), f"nothing arrived after the broker died:\n{after.read_text()}"
        assert demo.poll() is None
        print(f"the consumer started before the kill still prints: {_grows(before, 5)}")
        print(f"records flow after the kill ({time.monotonic() - started:.0f}s)")

        # Every metrics endpoint answers with Prometheus text.
        for name, url in metrics.items():
            if name == f"live broker {victim}":
                continue
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read().decode()
            assert response.status == 200 and "# TYPE" in body, (name, body[:300])

        # SIGUSR1 starts the dead broker again.
        demo.send_signal(signal.SIGUSR1)
        _wait_for("the broker back", lambda: f"live broker {victim} is back" in out.read_text(), 90, demo, out)
    finally:
        for consumer in consumers:
            consumer.terminate()
            try:
                consumer.wait(10)
            except subprocess.TimeoutExpired:
                consumer.kill()
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        try:
            code = demo.wait(120)
        except subprocess.TimeoutExpired:
            demo.kill()
            code = None
    text = out.read_text()
    assert code == 0, text[-6000:]
    assert "stopped every process it started" in text
    assert not [pid for pid in brokers.values() if _alive(pid)]
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "demo left processes running"
    print(f"whole test {time.monotonic() - started:.0f}s")
