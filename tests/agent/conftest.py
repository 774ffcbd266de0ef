"""Agent-only fixtures: a fake producer for in-process runs, config builders, waiting.

The fake producer stands in for ``broker.client.Producer`` in unit tests of the
runtime (rotation, truncation, backpressure, failure rewinds) so they run in
milliseconds without a broker; the integration tests use real broker processes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import msgpack
import pytest

from agent.config import AgentConfig, parse_config
from agent.runtime import Agent


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
        self.error_factory: Callable[[], BaseException] = lambda: _retriable()
        self.pending: list[tuple[str, list[bytes], FakeFuture]] = []

    def send(self, topic: str, values: Any, key: bytes | None = None,
             partition: int | None = None, timestamp: int | None = None) -> FakeFuture:
        vals = [values] if isinstance(values, bytes) else list(values)
        future = FakeFuture()
        with self.lock:
            self.sent.append((topic, vals, key, future))
            if self.hold:
                self.pending.append((topic, vals, future))
                return future
            fail = self.fail_next > 0
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
    from broker.errors import BrokerNotAvailableError

    return BrokerNotAvailableError("fake: broker down")


def agent_config(tmp_path: Path, sources: list[dict[str, Any]] | None = None,
                 **top: Any) -> AgentConfig:
    """A fast-polling config over ``tmp_path/logs`` publishing to topic ``logs``."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    doc: dict[str, Any] = {
        "host": "test-host", "state_dir": str(tmp_path / "state"),
        "cluster": {"brokers": ["127.0.0.1:1"]},
        "poll_interval_s": 0.02, "scan_interval_s": 0.2, "checkpoint_interval_s": 0.1,
        "rotated_close_s": 0.3,
        "sources": sources or [{"pattern": f"{logs}/*.log", "topic": "logs"}],
    }
    doc.update(top)
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

    def start(self) -> "RunningAgent":
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


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
