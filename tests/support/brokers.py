"""Real broker processes for integration tests: start, stop, kill -9, restart.

Each broker runs as ``python -m broker broker --config <toml>`` on a free port of
127.0.0.1 with its own log dir, registered in the test's ZooKeeper chroot. The
``broker_cluster`` fixture starts as many as a test asks for and always stops them;
a failed test prints each broker's log tail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.ports import free_port

READY_TIMEOUT = 30.0


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


class BrokerProcess:
    """One broker subprocess with a fixed id, port and log dir across restarts."""

    def __init__(self, broker_id: int, zk_connect: str, workdir: Path,
                 broker: dict[str, Any] | None = None, log: dict[str, Any] | None = None):
        self.id = broker_id
        self.port = free_port()
        self.zk_connect = zk_connect
        self.workdir = workdir
        self.log_dir = workdir / f"broker-{broker_id}-data"
        self.log_file = workdir / f"broker-{broker_id}.log"
        self.config_file = workdir / f"broker-{broker_id}.toml"
        self.broker_settings = {"id": broker_id, "host": "127.0.0.1", "port": self.port,
                                "datacenter": "test", "log_dirs": [str(self.log_dir)],
                                "zk_connect": zk_connect, "num_partitions": 4,
                                "zk_session_timeout_s": 6.0, **(broker or {})}
        self.log_settings = {"flush_messages": 10000, "flush_ms": 20, **(log or {})}
        self.proc: subprocess.Popen | None = None
        self._write_config()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        lines = ["[broker]"] + [f"{k} = {_toml_value(v)}" for k, v in self.broker_settings.items()]
        lines += ["", "[log]"] + [f"{k} = {_toml_value(v)}" for k, v in self.log_settings.items()]
        self.config_file.write_text("\n".join(lines) + "\n")

    def start(self, wait: bool = True) -> "BrokerProcess":
        """Start the process; with ``wait``, return once it accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        out = self.log_file.open("ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "broker", "--config", str(self.config_file)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=str(Path(__file__).resolve().parents[2]))
        out.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the port accepts connections and the log says it registered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.id} exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if "listening on" in self.log_text():
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise TimeoutError(f"broker {self.id} not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"broker {self.id} ignored SIGTERM for {timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """kill -9: no flush, no deregistration."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP the process (a hung broker)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> "BrokerProcess":
        """Clean stop then start with the same id, port and data."""
        self.stop()
        return self.start()

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def segment_files(self) -> list[Path]:
        """Every segment file this broker holds."""
        return sorted(self.log_dir.glob("*/*.log"))


class Cluster:
    """Brokers of one test cluster sharing a ZooKeeper chroot."""

    def __init__(self, zk_connect: str, workdir: Path):
        self.zk_connect = zk_connect
        self.workdir = workdir
        self.brokers: list[BrokerProcess] = []

    def add(self, broker: dict[str, Any] | None = None, log: dict[str, Any] | None = None,
            start: bool = True) -> BrokerProcess:
        process = BrokerProcess(len(self.brokers) + 1, self.zk_connect, self.workdir, broker, log)
        self.brokers.append(process)
        if start:
            process.start()
        return process

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers]

    def stop_all(self) -> None:
        for broker in self.brokers:
            try:
                if broker.proc is not None and broker.proc.poll() is None:
                    broker.resume()
            except Exception:
                pass
            try:
                broker.stop()
            except Exception:
                broker.kill()

    def logs(self) -> str:
        return "\n".join(f"--- broker {b.id} ({b.log_file}) ---\n{b.log_tail(60)}" for b in self.brokers)


@pytest.fixture
def broker_cluster(zk_connect: str, tmp_path: Path, request) -> Iterator:
    """Factory: ``broker_cluster(n=1, broker={...}, log={...}) -> Cluster``; all stopped after."""
    clusters: list[Cluster] = []

    def start(n: int = 1, broker: dict[str, Any] | None = None, log: dict[str, Any] | None = None,
              zk: str | None = None) -> Cluster:
        cluster = Cluster(zk or zk_connect, tmp_path / f"cluster-{len(clusters)}")
        cluster.workdir.mkdir(parents=True, exist_ok=True)
        clusters.append(cluster)
        for _ in range(n):
            cluster.add(broker, log)
        return cluster

    yield start
    failed = getattr(request.node, "rep_call", None)
    for cluster in clusters:
        if failed is not None and failed.failed:
            print(cluster.logs())
        cluster.stop_all()
