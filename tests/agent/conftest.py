"""Agent-only fixtures: a fake producer for in-process runs, config builders, waiting.

The fake producer stands in for ``broker.client.Producer`` in unit tests of the
runtime (rotation, truncation, backpressure, failure rewinds) so they run in
milliseconds without a broker; the integration tests use real broker processes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from agent.config import AgentConfig, parse_config
from agent.runtime import Agent
from broker.common.config import dumps
from tests.support import waiting


class FakeFuture:
    """Quacks like ``DeliveryFuture``: done/exception/add_callback/wait."""

    def __init__(self) -> None:
        self._done = False
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._done

    def exception(self) -> BaseException | None:
        return self._error

    def add_callback(self, fn: Callable[[Any], None]) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        fn(self)

    def complete(self, error: BaseException | None = None) -> None:
        with self._lock:
            self._done = True
            self._error = error
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)


class FakeProducer:
    """Records sends; acknowledges at once unless ``hold`` is set; can fail sends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[tuple[str, list[bytes], bytes | None, FakeFuture]] = []
        self.acked: dict[str, list[bytes]] = {}
        self.hold = False
        self.fail_next = 0
        self.fail_topic: str | None = None
        """When set, only sends to this topic fail (not the agent's heartbeats or audit)."""
        self.error_factory: Callable[[], BaseException] = lambda: _retriable()
        self.pending: list[tuple[str, list[bytes], FakeFuture]] = []

    def send(
        self,
        topic: str,
        values: Any,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> FakeFuture:
        vals = [values] if isinstance(values, bytes) else list(values)
        future = FakeFuture()
        with self.lock:
            self.sent.append((topic, vals, key, future))
            if self.hold:
                self.pending.append((topic, vals, future))
                return future
            fail = self.fail_next > 0 and self.fail_topic in (None, topic)
            if fail:
                self.fail_next -= 1
            else:
                self.acked.setdefault(topic, []).extend(vals)
        future.complete(self.error_factory() if fail else None)
        return future

    def release(self) -> None:
        """Acknowledge everything held, in order."""
        with self.lock:
            pending, self.pending = self.pending, []
            self.hold = False
            for topic, vals, _ in pending:
                self.acked.setdefault(topic, []).extend(vals)
        for _, _, future in pending:
            future.complete()

    def fail_held(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, []
            self.hold = False
        for _, _, future in pending:
            future.complete(self.error_factory())

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass

    def records(self, topic: str) -> list[dict[str, Any]]:
        with self.lock:
            return [msgpack.unpackb(v) for v in self.acked.get(topic, [])]


def _retriable() -> BaseException:
    from broker.common.errors import BrokerNotAvailableError

    return BrokerNotAvailableError("fake: broker down")


def agent_config(tmp_path: Path, sources: list[dict[str, Any]] | None = None, **top: Any) -> AgentConfig:
    """A fast-polling config over ``tmp_path/logs`` publishing to topic ``logs``."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    doc: dict[str, Any] = {
        "host": "test-host",
        "state_dir": str(tmp_path / "state"),
        "cluster": {"brokers": ["127.0.0.1:1"]},
        "poll_interval_s": 0.02,
        "scan_interval_s": 0.2,
        "checkpoint_interval_s": 0.1,
        "rotated_close_s": 0.3,
        "sources": sources or [{"pattern": f"{logs}/*.log", "topic": "logs"}],
    }
    doc.update(top)
    # no heartbeat among the fake producer's sends (tests/unit/test_audit_tiers.py tests it)
    doc["audit"] = {"heartbeat_s": 0, **doc.get("audit", {})}
    return parse_config(doc)


class RunningAgent:
    """An Agent running in a thread of the test process."""

    def __init__(self, config: AgentConfig, producer: FakeProducer):
        self.config = config
        self.producer = producer
        self.agent = Agent(config, producer_factory=lambda _c: producer)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.agent.run()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def start(self) -> RunningAgent:
        self.thread.start()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self.agent.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "agent did not stop"
        if self.error is not None:
            raise self.error


@pytest.fixture
def fake_producer() -> FakeProducer:
    return FakeProducer()


@pytest.fixture
def run_agent(fake_producer: FakeProducer) -> Iterator[Callable[[AgentConfig], RunningAgent]]:
    """Factory: start an Agent on a config with the fake producer; stopped after the test."""
    running: list[RunningAgent] = []

    def start(config: AgentConfig, producer: FakeProducer | None = None) -> RunningAgent:
        agent = RunningAgent(config, producer or fake_producer).start()
        running.append(agent)
        return agent

    yield start
    for agent in running:
        if agent.thread.is_alive():
            agent.stop()


wait_until = functools.partial(waiting.wait_until, interval=0.01)
"""The suite's wait_until, polling fast: the agent under test runs in this process."""


# -- integration: the agent as a real process against real brokers ----------------------

REPO = Path(__file__).resolve().parents[2]


class AgentProcess:
    """``python -m agent --config`` as a subprocess: start, SIGTERM, kill -9, status."""

    def __init__(self, workdir: Path, doc: dict[str, Any]):
        self.workdir = workdir
        self.doc = doc
        self.config_file = workdir / "agent.toml"
        self.log_file = workdir / "agent.log"
        self.state_dir = Path(doc["state_dir"])
        self.config_file.write_text(dumps(doc))
        self.proc: Any = None

    def start(self) -> AgentProcess:
        import os

        from broker.testing import prefork

        with self.log_file.open("ab") as out:  # from the worker's fork server (broker.testing.prefork)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = prefork.start_module("agent", ["--config", str(self.config_file)], out, env, REPO)
        wait_until(lambda: self.status().get("state") == "running" or self.proc.poll() is not None, 30, "agent start")
        assert self.proc.poll() is None, f"agent exited at start:\n{self.log_tail()}"
        return self

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM; wait for the clean exit; return its code."""
        import signal
        import subprocess

        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"agent ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None

    def kill(self) -> None:
        """kill -9: no flush, no checkpoint."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any]:
        import json

        try:
            return json.loads((self.state_dir / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def counter(self, name: str) -> int:
        return int(self.status().get("counters", {}).get(name, 0))

    def peak_rss_kib(self) -> int:
        """VmHWM of the running process (peak resident memory)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@pytest.fixture
def agent_process(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., AgentProcess]]:
    """Factory ``agent_process(doc) -> AgentProcess`` (not started); killed after the test."""
    from tests.support import register_log_source, unregister_log_source

    made: list[AgentProcess] = []

    def make(doc: dict[str, Any]) -> AgentProcess:
        workdir = tmp_path / f"agent-{len(made)}"
        workdir.mkdir()
        process = AgentProcess(workdir, doc)
        made.append(process)
        register_log_source(
            request.config,
            f"agent-{len(made)}",
            process,
            fixture="agent_process",
            title=f"agent log ({process.log_file})",
        )
        return process

    yield make
    for i, process in enumerate(made):
        process.kill()
        unregister_log_source(request.config, f"agent-{i + 1}")


class NumberedLog:
    """A log file a test appends numbered lines to (``line 0000042 of the test log``), so
    what reached a topic can be checked line by line against what was written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = 0

    @staticmethod
    def line(number: int) -> str:
        return f"line {number:07d} of the test log"

    def write(self, n: int) -> None:
        """Appends the next ``n`` lines."""
        with open(self.path, "ab") as handle:
            handle.write("".join(self.line(self.written + i) + "\n" for i in range(n)).encode())
        self.written += n

    def expected(self) -> list[str]:
        """Every line written so far, in order."""
        return [self.line(i) for i in range(self.written)]


def consume(bootstrap: list[str], topic: str, timeout: float = 5.0) -> list[Any]:
    """Every message of ``topic`` (all partitions, each in order), values decoded."""
    from broker.client import SimpleConsumer

    out: list[Any] = []
    with SimpleConsumer(brokers=bootstrap) as consumer:
        for partition in consumer.partitions(topic):
            for message in consumer.messages(topic, partition, "earliest"):
                out.append((partition, message, msgpack.unpackb(message.value)))
    return out
