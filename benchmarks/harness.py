"""A throwaway logferry cluster for benchmarks: one ZooKeeper and N broker processes.

Everything binds 127.0.0.1 on free ports and lives under one directory; leaving the
``with`` block stops every process, also on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from broker.zkserver import LocalZooKeeper

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value) + '"'


class LocalCluster:
    """ZooKeeper plus ``brokers`` broker subprocesses for a benchmark run."""

    def __init__(self, workdir: Path, brokers: int = 1, chroot: str = "/bench",
                 broker: dict[str, Any] | None = None, log: dict[str, Any] | None = None):
        self.workdir = workdir
        self.zk_port = free_port()
        self.zookeeper = LocalZooKeeper(workdir / "zookeeper", self.zk_port)
        self.zk_connect = f"127.0.0.1:{self.zk_port}{chroot}"
        self.count = brokers
        self.broker_settings = broker or {}
        self.log_settings = log or {}
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []

    @property
    def bootstrap(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def data_dirs(self) -> list[Path]:
        return [self.workdir / f"broker-{i + 1}" for i in range(self.count)]

    def __enter__(self) -> "LocalCluster":
        try:
            self.zookeeper.start()
            self.zookeeper.wait_ready(30)
            for i in range(self.count):
                self._start_broker(i + 1)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start_broker(self, broker_id: int) -> None:
        port = free_port()
        settings = {"id": broker_id, "host": "127.0.0.1", "port": port,
                    "log_dirs": [str(self.workdir / f"broker-{broker_id}")],
                    "zk_connect": self.zk_connect, "num_partitions": 1,
                    **self.broker_settings}
        config = self.workdir / f"broker-{broker_id}.toml"
        lines = ["[broker]"] + [f"{k} = {_toml(v)}" for k, v in settings.items()]
        lines += ["[log]"] + [f"{k} = {_toml(v)}" for k, v in self.log_settings.items()]
        config.write_text("\n".join(lines) + "\n")
        log = (self.workdir / f"broker-{broker_id}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "broker", "broker", "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
        log.close()
        self.procs.append(proc)
        self.ports.append(port)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"broker {broker_id} exited; see {self.workdir}/broker-{broker_id}.log")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                time.sleep(0.2)  # registration in ZooKeeper follows listening
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker {broker_id} did not start in 30 s")

    def broker_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.zookeeper.stop()
