"""Child processes of the demo: start with a log file, wait until ready, stop in order.

Every component runs as ``python -m broker <command> --config FILE`` (ZooKeeper as its
JVM, through :class:`~broker.testing.zkserver.LocalZooKeeper`), in a session of its own so that
Ctrl-C reaches only the demo, which then stops the pipeline front to back (agents
first, ZooKeeper last). Linux also sends each child SIGTERM if the demo itself dies
(``PR_SET_PDEATHSIG``), so even a ``kill -9`` of the demo leaves nothing behind. Every
wait is bounded.

A child that dies while the demo expects it to run (a broker killed by the user to
watch a failover, say) does not stop the demo: :meth:`Supervisor.exits` reports it
once, :func:`exit_message` says what it means for its cluster, and
:meth:`Child.start` may start it again with the same config and ports.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker.common.config import dumps
from broker.common.errors import LogferryError
from broker.testing.localrun import free_port

ROOT = Path(__file__).resolve().parents[1]
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(Exception):  # not Linux: the demo's own cleanup still stops it
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class DemoError(LogferryError):
    """A stage of the demo failed to start or to finish; the message names its log."""


class Child:
    """One subprocess with a log file under the workdir."""

    def __init__(self, name: str, argv: list[str], log_path: Path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.watched = True
        """True while the demo expects it to run; an exit then is news (see Supervisor.exits)."""
        self.exit_seen = False
        self._log_start = 0

    @classmethod
    def logferry(cls, name: str, args: list[str], log_path: Path) -> Child:
        """``python -m broker <args>``: the ``logferry`` command with this interpreter."""
        return cls(name, [sys.executable, "-m", "broker", *args], log_path)

    def start(self) -> Child:
        """Start the process (again, after it died: same argv, its log appended to).

        Call from the main thread: ``PR_SET_PDEATHSIG`` fires when the *thread* that
        started a child exits, not only the process.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.watched, self.exit_seen = True, False
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(ROOT),
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_since_start(self) -> str:
        """What this run of the process logged (a restarted child appends to its log)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_start)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def terminate(self) -> None:
        """SIGTERM without waiting; the exit that follows is expected, not news."""
        self.watched = False
        if self.running() and self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until true; fail naming the log if the child exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if not self.running():
                raise DemoError(
                    f"{self.name} exited (code {self.returncode()}) before {what}; "
                    f"its log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        raise DemoError(f"{self.name}: no {what} within {timeout:.0f}s; its log {self.log_path}:\n{self.log_tail()}")

    def wait(self, timeout: float) -> int | None:
        """Wait for the child to exit by itself; None if it is still running after ``timeout``."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait ``timeout`` s; SIGKILL if it does not exit. Returns the exit code."""
        if self.proc is None:
            return None
        self.watched = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"[demo] {self.name} ignored SIGTERM for {timeout:.0f}s: killing it", flush=True)
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


PORT_RETRIES = 3
"""New ports a broker's first start may take when another program took one of its own."""


class BrokerChild(Child):
    """A broker started from an example config's settings, on a free port."""

    def __init__(
        self,
        name: str,
        broker_id: int,
        zk: str,
        workdir: Path,
        broker: Mapping[str, Any],
        log: Mapping[str, Any],
        datacenter: str = "",
        sections: Mapping[str, Any] | None = None,
    ):
        """``sections``: more tables of its config (``[tls]``, ``[auth]``, ... when secured)."""
        self.broker_id = broker_id
        self.datacenter = datacenter
        self.data_dir = workdir / "data" / name
        self._settings = {
            **broker,
            "id": broker_id,
            "host": "127.0.0.1",
            "log_dirs": [str(self.data_dir)],
            "zk_connect": zk,
        }
        self._tables = {"log": dict(log), **(sections or {})}
        self.config_path = workdir / "config" / f"{name}.toml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self._take_ports()
        super().__init__(
            name,
            [sys.executable, "-m", "broker", "broker", "--config", str(self.config_path)],
            workdir / "logs" / f"{name}.log",
        )

    def _take_ports(self) -> None:
        """Free ports for its listener and metrics, written into its config. A port is
        free when picked and bound a moment later, so another program may take it in
        between: :meth:`wait_ready` then picks new ones."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        settings = {**self._settings, "port": self.port, "metrics_port": self.metrics_port}
        self.config_path.write_text(dumps({"broker": settings, **self._tables}))
        self.config_path.chmod(0o600)

    def ready(self) -> bool:
        """This run of the broker logged "listening on" and its port accepts connections."""
        if "listening on" not in self.log_since_start():
            return False
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until it listens; a first start that lost one of its ports to another
        program (its listener's or its metrics' address "already in use") is started again on new ones, at most
        :data:`PORT_RETRIES` times."""
        for attempt in range(PORT_RETRIES + 1):
            try:
                self.wait_until(self.ready, timeout, "listening port")
                return
            except DemoError:
                if attempt == PORT_RETRIES or self.running() or "already in use" not in self.log_since_start().lower():
                    raise
            print(f"[demo] {self.name}: a port was taken before it could bind it; starting it on new ones", flush=True)
            self._take_ports()
            self.start()


ENSEMBLE_PREFIX = "127.0.42"
"""The loopback addresses of the demo's ZooKeeper members (``--zk-ensemble``): apart from
``logferry zk start --ensemble``'s default, so the two can run side by side."""


class Supervisor:
    """What the demo started, stopped in reverse order of start (agents before brokers)."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.zookeeper: Any = None

    def add(self, child: Child, watched: bool = True) -> Child:
        """Start ``child``; ``watched``: its exit is news (False for a job that ends)."""
        self.children.append(child)
        child.start()
        child.watched = watched
        return child

    def start_zookeeper(self, data_dir: Path, ensemble: int | None = None) -> str:
        """Start a ZooKeeper on a free port, or with ``ensemble`` that many members as one
        quorum (on :data:`ENSEMBLE_PREFIX` ``.1``, ``.2``, ...); return the connect string."""
        from broker.testing.zkensemble import LocalEnsemble
        from broker.testing.zkserver import LocalZooKeeper

        port = free_port()
        if ensemble:
            members = LocalEnsemble(data_dir, port, ensemble, ENSEMBLE_PREFIX)
            self.zookeeper = members
            members.start(timeout=60.0, detach=True)
            return members.hosts
        self.zookeeper = LocalZooKeeper(data_dir, port)
        self.zookeeper.start(timeout=60.0, detach=True)
        return f"127.0.0.1:{port}"

    def zookeeper_pids(self) -> list[int]:
        """The running ZooKeeper server's pid, or each running member's."""
        servers = getattr(self.zookeeper, "members", [self.zookeeper] if self.zookeeper is not None else [])
        return [s.pid for s in servers if s.pid]

    def stop_all(self) -> list[str]:
        """Stop every child still running and ZooKeeper; returns problems seen."""
        problems = []
        for child in reversed(self.children):
            if child.running():
                code = child.stop(30.0)
                if code not in (0, -signal.SIGTERM, None):
                    problems.append(f"{child.name} exited with {code} (log {child.log_path})")
        if self.zookeeper is not None:
            try:
                self.zookeeper.stop()
            except Exception as exc:  # noqa: BLE001 - report, keep stopping
                problems.append(f"ZooKeeper: {exc}")
            self.zookeeper = None
        return problems

    def exits(self) -> list[Child]:
        """Watched children that exited since the last call, each reported once."""
        out = []
        for child in self.children:
            if child.watched and not child.exit_seen and child.proc is not None and not child.running():
                child.exit_seen = True
                out.append(child)
        return out

    def pids(self) -> list[int]:
        return [c.pid for c in self.children if c.running() and c.pid] + self.zookeeper_pids()


def display_name(child: Child) -> str:
    """``live broker 2`` for a broker, the child's name otherwise."""
    if isinstance(child, BrokerChild):
        return f"{child.datacenter} broker {child.broker_id}"
    return child.name


def describe_code(code: int | None) -> str:
    """``-9`` -> ``"code -9 (SIGKILL)"``: a negative code is the signal that ended it."""
    if code is not None and code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"code {code}"


def exit_message(
    name: str, pid: int | None, code: int | None, cluster: str | None = None, survivors: list[int] | None = None
) -> str:
    """What the demo says when a child it expected to run exited.

    For a broker (``cluster`` and the ids of the ``survivors`` given) it says whether its
    cluster goes on: ``broker 2 (pid 4711) exited with code -9 (SIGKILL); the live cluster
    continues with broker 1``.
    """
    head = f"{name} (pid {pid}) exited with {describe_code(code)}"
    if cluster is None:
        return head
    if not survivors:
        return f"{head}; the {cluster} cluster has no broker left: its clients retry until one is back"
    ids = ", ".join(str(i) for i in sorted(survivors))
    noun = "broker" if len(survivors) == 1 else "brokers"
    return f"{head}; the {cluster} cluster continues with {noun} {ids}"
