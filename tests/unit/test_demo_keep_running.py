"""The sans-IO parts of ``logferry demo --keep-running``: what the demo says when a
process dies, the metrics ports it writes into the configs, and rotation that a second
writer of the same files continues without renaming onto a rotated file.

tests/integration/test_demo_keep_running.py runs the whole thing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from demo import configs
from demo.hosts import LogFile, WebHost, app_vocabulary, sources_from_agent_config
from demo.processes import describe_code, exit_message


def test_a_killed_broker_names_the_brokers_its_cluster_continues_with() -> None:
    text = exit_message("live broker 2", 4711, -9, "live", [3, 1])
    assert text == (
        "live broker 2 (pid 4711) exited with code -9 (SIGKILL); the live cluster continues with brokers 1, 3"
    )
    assert exit_message("live broker 2", 1, 1, "live", [1]).endswith(
        "exited with code 1; the live cluster continues with broker 1"
    )


def test_the_last_broker_of_a_cluster_says_its_clients_wait() -> None:
    text = exit_message("analysis broker 1", 12, -15, "analysis", [])
    assert "code -15 (SIGTERM)" in text
    assert "the analysis cluster has no broker left" in text


def test_other_processes_and_odd_codes() -> None:
    assert exit_message("agent web-1", 5, 2) == "agent web-1 (pid 5) exited with code 2"
    assert describe_code(None) == "code None"
    assert describe_code(-200) == "code -200"  # not a signal number: shown as is


def test_agents_and_the_mirror_get_the_metrics_port_the_demo_chose(tmp_path: Path) -> None:
    template = configs.load(configs.agent_template())
    doc = configs.agent_config(
        template, "web-1", tmp_path / "h", tmp_path / "s", "127.0.0.1:2181/x", 5.0, metrics_port=41234
    )
    assert doc["metrics"] == {"port": 41234, "bind": "127.0.0.1"}
    assert "metrics" not in configs.agent_config(
        template, "web-1", tmp_path / "h", tmp_path / "s", "127.0.0.1:2181/x", 5.0
    )
    mirror = configs.mirror_config(configs.load(configs.mirror_template()), "a", "b", tmp_path / "status.json", 41235)
    assert mirror["metrics"]["port"] == 41235 and mirror["metrics"]["host"] == "127.0.0.1"


def test_broker_settings_leave_the_ports_to_the_demo() -> None:
    _, broker, _ = configs.broker_settings(configs.broker_templates("live")[0])
    assert not set(configs.MACHINE_KEYS) & set(broker)


def test_rotation_continues_the_numbering_of_an_earlier_writer(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    first = LogFile(path)
    first.write(b"one\n")
    first.rotate()
    first.write(b"two\n")
    first.close()
    again = LogFile(path, rotations=first.rotations)  # the keep-running writer
    again.write(b"three\n")
    again.rotate()
    again.close()
    assert (tmp_path / "app.log.1").read_bytes() == b"one\n"
    assert (tmp_path / "app.log.2").read_bytes() == b"two\nthree\n"
    assert path.read_bytes() == b""


def test_a_writer_without_end_writes_until_stopped(tmp_path: Path) -> None:
    specs = sources_from_agent_config(configs.load(configs.agent_template()))
    stop = threading.Event()
    host = WebHost(
        "web-1", tmp_path, specs, 200.0, float("inf"), 3600.0, stop, seed=1, vocabulary=app_vocabulary(), rotated=4
    )
    host.start()
    try:
        deadline = time.monotonic() + 10
        while sum(c.records for c in host.counts.values()) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(c.records for c in host.counts.values()) >= 20
        assert host.is_alive()
    finally:
        stop.set()
        host.join(5)
    assert not host.is_alive() and host.error is None
    assert host.rotations == 4 and all(f.rotations == 4 for f in host.files.values())


def test_the_guide_lists_commands_pids_and_metrics_urls(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from demo.keep import KeepRunning
    from demo.processes import BrokerChild

    brokers = {
        dc: [BrokerChild(f"{dc}-broker-{i}", i, "zk", tmp_path, {}, {}, datacenter=dc) for i in ids]
        for dc, ids in (("live", (1, 2)), ("analysis", (1,)))
    }
    pipeline = SimpleNamespace(
        live_zk="127.0.0.1:1/logferry/live",
        analysis_zk="127.0.0.1:1/logferry/analysis",
        topics=["app-logs", "access-logs"],
        mirror=object(),
        mirror_group="mirror-analysis",
        brokers=brokers,
        agent_metrics={"web-1": "http://127.0.0.1:9"},
        mirror_metrics="http://127.0.0.1:8",
        dashboard=None,
    )
    phase = KeepRunning(pipeline, [], threading.Event(), 20.0, "logferry")  # type: ignore[arg-type]
    text = phase.guide()
    assert "export LOGFERRY_ZK=127.0.0.1:1/logferry/live" in text
    assert "logferry consume app-logs --from latest --follow" in text
    assert "# live broker 2 (127.0.0.1:" in text and "kill -USR1" in text
    for b in brokers["live"]:
        assert b.metrics_url in text
    assert "http://127.0.0.1:9/status" in text and "http://127.0.0.1:8/metrics" in text
    line = phase.status_line()  # nothing started: every broker is down
    assert "hosts wrote 0 records" in line and "live brokers up: none" in line


def test_r_and_enter_on_the_terminal_asks_for_a_restart(monkeypatch, tmp_path: Path) -> None:
    import os
    import sys
    from types import SimpleNamespace

    from demo.keep import KeepRunning

    read_fd, write_fd = os.pipe()
    with open(read_fd) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        phase = KeepRunning(
            SimpleNamespace(),
            [],
            threading.Event(),
            20.0,  # type: ignore[arg-type]
            "logferry",
        )
        phase.interactive = True  # a pipe stands in for the terminal
        os.write(write_fd, b"r\n")
        phase._read_stdin(1.0)
        assert phase.restart_requested.is_set()
        os.close(write_fd)
        phase._read_stdin(1.0)  # end of input: stop listening, never spin on it
        assert not phase.interactive
