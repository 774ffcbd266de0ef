"""What every system in the paper experiment provides, and the helpers they share.

Each system (logferry, RabbitMQ, ActiveMQ, NATS JetStream, Redis Streams) is a :class:`System`: it starts its own
server on 127.0.0.1 in a private data directory, runs the paper's cases when asked, and
stops everything it started. The harness (``paper_experiment.py``) only times the case
methods, so each method must return exactly when its case is complete, as the case
defines it (see ``docs/benchmarks.md``), and never earlier.
"""

from __future__ import annotations

import abc
import contextlib
import os
import random
import signal
import socket
import string
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PAYLOAD_SIZE = 200
"""Message size of the paper's experiment (section 5): 200 bytes."""

PER_ACK = 50
"""Messages per acknowledgement in the second producer case (the paper's batch of 50)."""

LOOPBACK = "127.0.0.1"


def make_payload(size: int = PAYLOAD_SIZE) -> bytes:
    """A fixed, printable, incompressible-enough message body of ``size`` bytes.

    Printable so that every protocol (STOMP frames included) carries it unchanged, and
    the same in every run so that runs are comparable.
    """
    rng = random.Random(2011)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size)).encode()


class PeerUnavailable(Exception):
    """The system cannot run here (not installed and not installable, failed to start).

    The harness prints the message and skips the system: the message must say what
    to do about it.
    """


class CaseFailed(Exception):
    """A case did not complete (timeout, lost messages): its figures are not valid."""


class Deadline:
    """A time budget for one case, so that every loop of the benchmark is bounded."""

    def __init__(self, seconds: float, what: str):
        self.what = what
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self.end - time.monotonic())

    def check(self) -> None:
        """Raise :class:`CaseFailed` once the budget is spent."""
        if time.monotonic() > self.end:
            raise CaseFailed(f"{self.what} did not finish within {self.seconds:.0f} s")


class Stopwatch:
    """The clock of one case: the case starts it after its untimed setup (connections,
    queue declarations, topic creation) and stops it when the case is complete."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.stopped: float | None = None

    def start(self) -> None:
        """Start timing now."""
        self.started = time.perf_counter()

    def stop(self) -> None:
        """Stop timing now (the case is complete)."""
        self.stopped = time.perf_counter()

    @property
    def seconds(self) -> float:
        """Elapsed seconds between start and stop."""
        if self.started is None or self.stopped is None:
            raise CaseFailed("the case did not start and stop its clock")
        return self.stopped - self.started


class System(abc.ABC):
    """One messaging system under test; see the module docstring for the contract."""

    name: str = "?"

    @abc.abstractmethod
    def ensure_installed(self) -> None:
        """Install what is missing, or raise :class:`PeerUnavailable` saying why not."""

    @abc.abstractmethod
    def start(self, workdir: Path) -> None:
        """Start the server(s) on 127.0.0.1 with data under ``workdir``; wait until ready."""

    @abc.abstractmethod
    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """Send ``count`` messages one per call without acks; stop the clock once the
        broker confirmed the last one (so it holds all of them)."""

    @abc.abstractmethod
    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """Send ``count`` messages in groups of ``per_ack``, waiting for the broker's
        acknowledgement of each group before sending the next."""

    @abc.abstractmethod
    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """Read ``dest`` from the start until ``count`` messages arrived; return the count.

        Every message is handed to Python one by one (counted), as an application would.
        """

    @abc.abstractmethod
    def storage_bytes(self, dest: str) -> int:
        """Bytes on disk now that can be charged to ``dest`` (or to the whole store,
        when the system does not keep destinations apart; the harness takes the
        difference around a case)."""

    def drop(self, dest: str) -> None:  # noqa: B027 - a hook: a no-op where the system cannot free a destination
        """Free what ``dest`` holds, when the system can (untimed housekeeping)."""

    @abc.abstractmethod
    def latency_client(self) -> Any:
        """A picklable :class:`benchmarks.e2e.LatencyClient` for the started server: the
        end-to-end latency case runs its consumer side in another process. It uses the
        system's documented low-latency settings with persistence still on."""

    def latency_variants(self) -> list[tuple[str, Any]]:
        """The latency case's clients by the name the report gives each: the system's
        own settings, and for a system that offers it, another durability setting."""
        return [(self.name, self.latency_client())]

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every process this system started. Safe to call twice or after a
        failed start."""


# --- processes -------------------------------------------------------------------------


class Server:
    """A server process started in its own session, so that it and its children can be
    stopped as one process group, by id, and do not receive the terminal's Ctrl-C
    before the harness has had a chance to stop them in order."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ):
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - the process's log while it runs; closed in stop()
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        """Process id (also the process group id: the process leads its own session)."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the process's output, to explain a failure."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL it."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader may be gone while children of its group still run: finish them.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def wait_until(
    probe: Callable[[], bool], timeout: float, what: str, server: Server | None = None, interval: float = 0.2
) -> None:
    """Call ``probe`` until it returns True; raise :class:`PeerUnavailable` after
    ``timeout`` seconds or as soon as ``server`` died (with its last log lines)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server is not None and not server.alive():
            raise PeerUnavailable(
                f"{what}: the server exited (code {server.proc.returncode}); last log lines:\n{server.log_tail()}"
            )
        try:
            if probe():
                return
        except Exception:  # not ready yet: refused connections and the like
            pass
        time.sleep(interval)
    tail = f"; last log lines:\n{server.log_tail()}" if server is not None else ""
    raise PeerUnavailable(f"{what}: not ready after {timeout:.0f} s{tail}")


def port_open(port: int, host: str = LOOPBACK) -> bool:
    """True if a TCP connection to host:port succeeds."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


# --- disk usage ------------------------------------------------------------------------


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (st_blocks), so that preallocated sparse
    journal files count what they hold, not their nominal size."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed while we walk
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def settled(measure: Callable[[], int], timeout: float = 5.0, interval: float = 0.25) -> int:
    """``measure()`` once it returns the same value twice in a row (asynchronous
    flushes have landed), or its last value after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    last = measure()
    while time.monotonic() < end:
        time.sleep(interval)
        now = measure()
        if now == last:
            return now
        last = now
    return last
