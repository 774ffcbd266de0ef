"""Running brokers as local processes: for tests, benchmarks and the demo.

One place knows how to write a broker's TOML file, pick a free port on 127.0.0.1,
start ``python -m broker broker --config ...``, wait until it serves, and stop it
with SIGTERM (or kill -9 it on purpose). Nothing here is used by a deployed broker.
The test suite starts its brokers from a fork server (:mod:`broker.testing.prefork`):
the same program in a process of its own, without importing it again each time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.common.config import dumps
from broker.testing import netns
from broker.testing.prefork import ChildProcess, start_module

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
DEFAULT_PORT = 9092
"""A broker's port on a host of its own (a network namespace): nothing else listens there."""
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, never the same one twice in this process.

    The port is released before the caller binds it, so another program could take
    it in between; servers fail fast on a taken port, which callers can retry.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no new free port on {host} after 100 tries")


class BrokerProcess:
    """One broker subprocess with a fixed id, port and log dir across restarts."""

    def __init__(
        self,
        broker_id: int,
        zk_connect: str,
        workdir: Path,
        broker: Mapping[str, Any] | None = None,
        log: Mapping[str, Any] | None = None,
        name: str | None = None,
        tls: Mapping[str, Any] | None = None,
        kafka: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        netns: str | None = None,
    ):
        """``tls``: the broker's ``[tls]`` table (docs/configuration.md); none: plaintext.
        ``kafka``: its ``[kafka]`` table (docs/kafka.md); none: no Kafka listener.
        ``netns``: the network namespace it runs in (a host of
        :mod:`broker.testing.network`), where it binds and advertises ``host``
        (that host's address) on ``port`` (default: 9092 in a namespace of its own,
        else a free port)."""
        self.id = broker_id
        self.name = name or f"broker-{broker_id}"
        self.host = host
        self.netns = netns
        self.port = port if port is not None else (DEFAULT_PORT if netns else free_port(host))
        self.zk_connect = zk_connect
        self.workdir = workdir
        self.log_dir = workdir / f"{self.name}-data"
        self.log_file = workdir / f"{self.name}.log"
        self.config_file = workdir / f"{self.name}.toml"
        self.broker_settings = {
            "id": broker_id,
            "host": host,
            "port": self.port,
            "log_dirs": [str(self.log_dir)],
            "zk_connect": zk_connect,
            **(broker or {}),
        }
        self.log_settings = dict(log or {})
        self.proc: ChildProcess | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self.tls_settings = dict(tls or {})
        doc: dict[str, Any] = {"broker": self.broker_settings, "log": self.log_settings}
        if self.tls_settings:
            doc["tls"] = self.tls_settings
        if kafka:
            doc["kafka"] = dict(kafka)
        self.config_file.write_text(dumps(doc))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def kafka_address(self) -> str:
        """``host:port`` of the running broker's Kafka listener (from its log, so
        ``[kafka] listen`` may ask for port 0)."""
        for line in reversed(self.log_text().splitlines()):
            if "speaks Kafka on " in line:
                return line.rsplit("speaks Kafka on ", 1)[1].strip()
        raise RuntimeError(f"{self.name} has no Kafka listener:\n{self.log_tail()}")

    def start(self, wait: bool = True) -> BrokerProcess:
        """Start the process; with ``wait``, return once it accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with self.log_file.open("ab") as out, self._inside():
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = start_module("broker", ["broker", "--config", str(self.config_file)], out, env, ROOT)
        if wait:
            self.wait_ready()
        return self

    def _inside(self) -> contextlib.AbstractContextManager[None]:
        """Its network namespace for the calling thread (nothing without one)."""
        return contextlib.nullcontext() if self.netns is None else netns.inside(self.netns)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the broker logged that it listens and its port accepts."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if "listening on" in self.log_text():
                try:
                    with self._inside():
                        socket.create_connection((self.host, self.port), timeout=0.5).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; SIGKILL (and an error) if it ignores SIGTERM."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGCONT)  # a paused broker cannot handle SIGTERM
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Leave the evidence in its log: its asyncio tasks, then its threads.
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(0.5)
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            self.proc.kill()
            self.proc.wait(5)
            raise RuntimeError(f"{self.name} ignored SIGTERM for {timeout}s:\n{self.log_tail(200)}") from None

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

    def restart(self) -> BrokerProcess:
        """Clean stop, then start with the same id, port and data."""
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
