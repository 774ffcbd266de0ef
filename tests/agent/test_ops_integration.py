"""Operating the agent against a real broker and ZooKeeper: ``agent check`` and SIGHUP.

``agent check`` runs as ``python -m agent check``; the reload test runs the agent as a
process, writes lines while its config is rewritten and reloaded, and counts what the
topics hold: every line of a kept file exactly once and in order, the new source's
lines, and only a prefix (in order, no duplicate) of a removed source's file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.common.config import dumps
from tests.agent.conftest import REPO, consume, wait_until
from tests.agent.test_integration import base_doc

pytestmark = pytest.mark.integration


def run_check(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", "check", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env=dict(os.environ),
    )


def test_check_against_a_real_cluster_ships_nothing(broker_cluster, tmp_path: Path) -> None:
    from broker.client import Admin

    cluster = broker_cluster(1)
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic("app", partitions=2)
    doc = base_doc(tmp_path, cluster.bootstrap)
    doc["cluster"] = {"zk": cluster.zk_connect}
    doc["sources"].append({"name": "web", "pattern": f"{tmp_path}/logs/*.txt", "topic": "web"})
    (tmp_path / "logs" / "a.log").write_bytes(b"line\n" * 1000)
    config = tmp_path / "agent.toml"
    config.write_text(dumps(doc))
    result = run_check(config)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{tmp_path}/logs/a.log: 4.9 KiB, starts at offset 0 (beginning)" in out
    assert f"source web -> topic web ({tmp_path}/logs/*.txt): 0 files" in out
    assert f"cluster (ZooKeeper {cluster.zk_connect}): 1 live broker: 1 at {cluster.bootstrap[0]}" in out
    assert "  topic app: 2 partitions, all with a leader" in out
    assert (
        "  topic web: does not exist yet; the brokers create it at the agent's first send (auto_create_topics)" in out
    )
    assert "  topic _audit: does not exist yet" in out
    assert out.rstrip().endswith("ok: the agent can start with this config")
    with Admin(zk=cluster.zk_connect) as admin:
        assert admin.list_topics() == ["app"]  # nothing created
    assert not Path(doc["state_dir"]).exists()  # no checkpoint, no lock


def test_check_fails_for_a_missing_topic_the_brokers_will_not_create(broker_cluster, tmp_path: Path) -> None:
    cluster = broker_cluster(1, broker={"auto_create_topics": False})
    doc = base_doc(tmp_path, cluster.bootstrap, audit={"enabled": False})
    config = tmp_path / "agent.toml"
    config.write_text(dumps(doc))
    result = run_check(config)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "  topic app: does not exist yet; the brokers do not create topics "
        "(auto_create_topics = false): create it with `logferry topic create app`" in result.stdout
    )
    assert result.stderr.strip().splitlines()[-1] == (
        "logferry agent check: error: topic app does not exist and the brokers do not create "
        "topics (auto_create_topics = false); create it with `logferry topic create app`"
    )


class Writer(threading.Thread):
    """Appends numbered lines to a few files, round robin, until stopped."""

    def __init__(self, paths: list[Path]):
        super().__init__(daemon=True)
        self.paths = paths
        self.written: dict[str, int] = {p.name: 0 for p in paths}
        self._halt = threading.Event()

    def run(self) -> None:
        handles = {p.name: open(p, "ab", buffering=0) for p in self.paths}  # noqa: SIM115 - closed below
        try:
            while not self._halt.is_set():
                for name, handle in handles.items():
                    n = self.written[name]
                    handle.write(b"".join(b"%s %06d\n" % (name.encode(), i) for i in range(n, n + 20)))
                    self.written[name] = n + 20
                time.sleep(0.01)
        finally:
            for handle in handles.values():
                handle.close()

    def stop(self) -> dict[str, int]:
        self._halt.set()
        self.join(10)
        return self.written


def lines_by_file(got: list[Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _, _, value in got:  # one partition per topic (key = host): the order sent
        out.setdefault(os.path.basename(value["file"]), []).append(value["line"])
    return out


def numbered(name: str, n: int) -> list[str]:
    return [f"{name} {i:06d}" for i in range(n)]


def test_sighup_reload_while_writing(broker_cluster, agent_process, tmp_path: Path) -> None:
    cluster = broker_cluster(1)
    logs = tmp_path / "logs"
    doc = base_doc(tmp_path, cluster.bootstrap)
    doc["sources"] = [
        {"name": "keep", "pattern": f"{logs}/keep*.log", "topic": "app"},
        {"name": "drop", "pattern": f"{logs}/drop.log", "topic": "old"},
    ]
    logs.mkdir(exist_ok=True)
    files = [logs / "keep1.log", logs / "keep2.log", logs / "drop.log", logs / "new.txt"]
    for path in files:
        path.touch()
    agent = agent_process(doc).start()
    writer = Writer(files)
    writer.start()
    wait_until(lambda: agent.counter("messages_acked") >= 2000, 30, "shipping")

    # Reload while the writer runs: drop removed, a new source added, keep unchanged.
    doc["sources"] = [
        {"name": "keep", "pattern": f"{logs}/keep*.log", "topic": "app"},
        {"name": "new", "pattern": f"{logs}/*.txt", "topic": "new"},
    ]
    agent.config_file.write_text(dumps(doc))
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: agent.counter("reloads") == 1, 15, "reload")
    time.sleep(1.0)

    # An invalid file on SIGHUP: logged, the running config stays, the agent runs on.
    agent.config_file.write_text(dumps({**doc, "sources": [{"pattern": "relative/*.log", "topic": "app"}]}))
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: agent.counter("reload_failures") == 1, 15, "failed reload")
    time.sleep(1.0)
    assert agent.running()
    written = writer.stop()
    total = written["keep1.log"] + written["keep2.log"] + written["new.txt"]
    wait_until(
        lambda: len(consume(cluster.bootstrap, "app")) + len(consume(cluster.bootstrap, "new")) >= total,
        60,
        "every kept line",
    )
    assert agent.running()
    assert agent.terminate() == 0

    kept = lines_by_file(consume(cluster.bootstrap, "app"))
    assert kept["keep1.log"] == numbered("keep1.log", written["keep1.log"])
    assert kept["keep2.log"] == numbered("keep2.log", written["keep2.log"])
    assert lines_by_file(consume(cluster.bootstrap, "new"))["new.txt"] == numbered("new.txt", written["new.txt"])
    dropped = lines_by_file(consume(cluster.bootstrap, "old"))["drop.log"]
    assert 0 < len(dropped) < written["drop.log"]
    assert dropped == numbered("drop.log", len(dropped))
    log = agent.log_file.read_text()
    assert "reloaded the config: added new; removed drop" in log
    assert "reload failed, still running with the previous config" in log
    assert "sources[0].pattern" in log
