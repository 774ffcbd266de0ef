"""Reloading the sources (SIGHUP) in-process with the fake producer, the pure config
comparisons behind it, and ``agent check``'s file plan. Milliseconds each."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.check import (
    ClusterCheck,
    TopicCheck,
    cluster_problems,
    format_cluster,
    format_files,
    human_bytes,
    plan_files,
    topics_of,
)
from agent.checkpoint import CheckpointStore
from agent.config import AgentConfig
from agent.errors import ConfigError
from agent.reload import apply_sources, held_limit_problem, restart_only_changes, source_changes
from agent.runtime import Agent
from tests.agent.conftest import FakeProducer, agent_config, wait_until


def lines(prefix: str, n: int, start: int = 0) -> bytes:
    return b"".join(b"%s %05d\n" % (prefix.encode(), i) for i in range(start, start + n))


def expected(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix} {i:05d}" for i in range(start, start + n)]


def by_file(producer: FakeProducer, topic: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record in producer.records(topic):
        out.setdefault(os.path.basename(record["file"]), []).append(record["line"])
    return out


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


class Reloadable:
    """An Agent in a thread whose config file is the attribute ``config`` (swap, then
    :meth:`reload`); loading raises ``error`` when set."""

    def __init__(self, config: AgentConfig, producer: FakeProducer):
        self.config = config
        self.error: Exception | None = None
        self.producer = producer
        self.agent = Agent(config, producer_factory=lambda _c: producer, reload_config=self._load)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _load(self) -> AgentConfig:
        if self.error is not None:
            raise self.error
        return self.config

    def _run(self) -> None:
        try:
            self.agent.run()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.failure = exc

    def reload(self, config: AgentConfig | None = None) -> None:
        before = self.counter("reloads") + self.counter("reload_failures")
        if config is not None:
            self.config = config
        self.agent.reload()
        wait_until(lambda: self.counter("reloads") + self.counter("reload_failures") > before, 5, "reload applied")

    def counter(self, name: str) -> int:
        return self.agent.metrics.counters[name]

    def stop(self) -> None:
        self.agent.stop()
        self.thread.join(20)
        assert not self.thread.is_alive()
        if self.failure is not None:
            raise self.failure


@pytest.fixture
def start(fake_producer: FakeProducer) -> Any:
    running: list[Reloadable] = []

    def make(config: AgentConfig) -> Reloadable:
        agent = Reloadable(config, fake_producer)
        running.append(agent)
        return agent

    yield make
    for agent in running:
        if agent.thread.is_alive():
            agent.stop()


def source(tmp_path: Path, name: str, glob: str, topic: str = "logs", **extra: Any) -> dict[str, Any]:
    return {"name": name, "pattern": str(tmp_path / "logs" / glob), "topic": topic, **extra}


def test_reload_keeps_positions_stops_removed_and_adds_new_sources(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    keep, drop, new = logs / "keep.log", logs / "drop.log", logs / "new.txt"
    keep.write_bytes(lines("k", 100))
    drop.write_bytes(lines("d", 100))
    new.write_bytes(lines("n", 50))
    first = agent_config(tmp_path, [source(tmp_path, "keep", "keep.log"), source(tmp_path, "drop", "drop.log")])
    agent = start(first)
    wait_until(lambda: len(fake_producer.records("logs")) == 200)
    append(keep, b"k 00100\nk 001")  # a partial line is held
    wait_until(
        lambda: agent.agent.inventory.files and all(t.at_eof for t in agent.agent.inventory.files.values()), 5, "read"
    )
    second = agent_config(
        tmp_path, [source(tmp_path, "keep", "keep.log", topic="logs"), source(tmp_path, "new", "*.txt", topic="other")]
    )
    agent.reload(second)
    append(keep, b"01\n" + lines("k", 50, 102))
    append(drop, lines("d", 10, 100))  # no source: not shipped
    append(new, lines("n", 5, 50))
    wait_until(lambda: len(by_file(fake_producer, "logs").get("keep.log", [])) == 152, 5, "kept file")
    wait_until(lambda: len(fake_producer.records("other")) == 55, 5, "new source")
    files = by_file(fake_producer, "logs")
    assert files["keep.log"] == expected("k", 152)  # once each, in order, none lost
    assert files["drop.log"] == expected("d", 100)  # stopped at the reload
    assert by_file(fake_producer, "other")["new.txt"] == expected("n", 55)
    assert agent.counter("reloads") == 1
    wait_until(lambda: not agent.agent.inventory.leaving, 5, "stopped file dormant")
    # The stopped file's position stays in the checkpoint: adding it back resumes there.
    third = agent_config(tmp_path, [source(tmp_path, "keep", "keep.log"), source(tmp_path, "drop", "drop.log")])
    agent.reload(third)
    wait_until(lambda: len(by_file(fake_producer, "logs")["drop.log"]) == 110, 5, "resumed")
    assert by_file(fake_producer, "logs")["drop.log"] == expected("d", 110)
    agent.stop()
    saved = CheckpointStore(first.state_dir, "test-host").load()
    assert sorted(os.path.basename(e.where) for e in saved.values()) == ["drop.log", "keep.log", "new.txt"]


def test_invalid_config_on_reload_keeps_the_running_one(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "logs" / "app.log"
    (tmp_path / "logs").mkdir()
    log.write_bytes(lines("a", 10))
    agent = start(agent_config(tmp_path))
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    agent.error = ConfigError("sources[0].pattern", "'x' must be an absolute glob pattern", "agent.toml")
    with caplog.at_level("ERROR", logger="logferry.agent"):
        agent.reload()
    assert agent.counter("reload_failures") == 1 and agent.counter("reloads") == 0
    assert "reload failed, still running with the previous config: agent.toml: sources[0].pattern" in caplog.text
    append(log, lines("a", 10, 10))
    wait_until(lambda: len(fake_producer.records("logs")) == 20)
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 20)
    assert agent.thread.is_alive()
    agent.stop()


def test_changed_line_rules_apply_from_the_next_message(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(b"one\n  two\nthree\n")
    agent = start(agent_config(tmp_path, [source(tmp_path, "app", "*.log")]))
    wait_until(lambda: len(fake_producer.records("logs")) == 3)
    agent.reload(agent_config(tmp_path, [source(tmp_path, "app", "*.log", multiline={"continuation": "^ "})]))
    append(log, b"four\n  five\nsix\n")
    wait_until(lambda: len(fake_producer.records("logs")) == 5, 5, "joined")
    assert [r["line"] for r in fake_producer.records("logs")] == ["one", "  two", "three", "four\n  five", "six"]
    agent.stop()


def test_restart_only_settings_are_named_and_not_applied(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "logs").mkdir()
    first = agent_config(tmp_path)
    agent = start(first)
    changed = agent_config(
        tmp_path, state_dir=str(tmp_path / "elsewhere"), cluster={"brokers": ["127.0.0.1:2"]}, producer={"linger_ms": 1}
    )
    with caplog.at_level("WARNING", logger="logferry.agent"):
        agent.reload(changed)
    assert "reload: state_dir, cluster.brokers, producer.linger_ms changed" in caplog.text
    assert agent.agent.config.state_dir == first.state_dir
    assert agent.agent.config.brokers == first.brokers
    agent.stop()


# -- the pure parts ---------------------------------------------------------------------


def test_restart_only_changes_and_source_changes(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    a = agent_config(tmp_path, [source(tmp_path, "a", "a.log"), source(tmp_path, "b", "b.log")])
    b = agent_config(
        tmp_path,
        [source(tmp_path, "a", "a.log", topic="t2"), source(tmp_path, "c", "c.log")],
        metrics={"port": 9999},
        audit={"window_s": 5},
    )
    assert restart_only_changes(a, b) == ["metrics.port", "audit.window_s"]
    assert restart_only_changes(a, apply_sources(a, b)) == []
    changes = source_changes(a.sources, b.sources)
    assert changes == (["c"], ["b"], ["a"])
    assert changes.describe() == "added c; removed b; changed a"
    assert not source_changes(a.sources, a.sources)
    assert source_changes(a.sources, a.sources).describe() == "no source changed"


def test_held_limit_is_checked_against_the_running_cap(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    small = agent_config(
        tmp_path,
        max_inflight_bytes=1 << 20,
        read_chunk_bytes=1 << 16,
        sources=[source(tmp_path, "a", "*.log", max_line_bytes=1 << 16)],
    )
    big = dataclasses.replace(small.sources[0], max_line_bytes=1 << 20)
    assert held_limit_problem(small) is None
    problem = held_limit_problem(dataclasses.replace(small, sources=(big,)))
    assert problem is not None and problem.startswith("sources[0].max_line_bytes")


def test_plan_files_uses_the_checkpoint_start_at_and_identity(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(lines("a", 10))
    (logs / "b.log").write_bytes(lines("b", 10) + b"partial")
    (logs / "c.txt").write_bytes(lines("c", 3))
    config = agent_config(
        tmp_path, [source(tmp_path, "app", "*.log"), source(tmp_path, "txt", "*.txt", start_at="end")]
    )
    plans, entries = plan_files(config)
    assert entries == 0
    assert [(p.source, os.path.basename(p.path), p.start, p.why) for p in plans] == [
        ("app", "a.log", 0, "beginning"),
        ("app", "b.log", 0, "beginning"),
        ("txt", "c.txt", 24, "end (start_at)"),
    ]
    # A checkpoint: a.log half read and then rotated to a.log.1 (not matched); b.log
    # replaced by another file since (same inode, other first bytes).
    producer = FakeProducer()
    agent = Agent(config, producer_factory=lambda _c: producer)
    runner = threading.Thread(target=agent.run, daemon=True)
    runner.start()
    wait_until(lambda: len(producer.records("logs")) == 20, 5, "shipped")
    agent.stop()
    runner.join(10)
    os.rename(logs / "a.log", logs / "a.log.1")
    with open(logs / "b.log", "r+b") as handle:
        handle.write(b"B")
    plans, entries = plan_files(config)
    assert entries == 3
    found = {os.path.basename(p.path): p for p in plans}
    assert found["a.log.1"].start == 80 and found["a.log.1"].why == "checkpoint"
    assert found["a.log.1"].name.endswith("a.log")
    assert found["b.log"].start == 0 and found["b.log"].why.startswith("beginning (")
    assert found["c.txt"].why == "checkpoint"
    text = "\n".join(format_files(config, plans, entries))
    assert "source app -> topic logs" in text and "(rotated from " in text
    assert topics_of(config) == ["logs", "_audit"]


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 3 << 20)] == ["0 B", "1023 B", "1.5 KiB", "3.0 MiB"]


def test_file_stopped_with_chunks_in_flight_goes_dormant_once_they_are_acked(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path, [source(tmp_path, "app", "*.log")])
    agent = start(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    fake_producer.hold = True
    append(log, lines("a", 10, 10))
    wait_until(lambda: fake_producer.pending, 5, "a chunk in flight")
    agent.reload(agent_config(tmp_path, [source(tmp_path, "app", "*.none")]))
    assert len(agent.agent.inventory.leaving) == 1
    append(log, lines("a", 10, 20))  # not read: no source matches
    fake_producer.release()
    wait_until(lambda: not agent.agent.inventory.leaving, 5, "dormant")
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 20)
    agent.reload(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 30, 5, "resumed")
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 30)
    agent.stop()


def test_a_source_in_a_new_directory_is_watched_after_the_reload(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    (tmp_path / "logs").mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "logs" / "a.log").write_bytes(lines("a", 5))
    first = agent_config(tmp_path, [source(tmp_path, "a", "*.log")], scan_interval_s=600)
    agent = start(first)
    wait_until(lambda: len(fake_producer.records("logs")) == 5)
    second = agent_config(
        tmp_path,
        [source(tmp_path, "a", "*.log"), {"name": "b", "pattern": f"{other}/*.log", "topic": "b"}],
        scan_interval_s=600,
    )
    agent.reload(second)
    (other / "b.log").write_bytes(lines("b", 7))  # found by watchdog: no rescan for 600 s
    wait_until(lambda: len(fake_producer.records("b")) == 7, 5, "new directory watched")
    agent.reload(first)  # and unwatched again: nothing breaks
    (other / "c.log").write_bytes(lines("c", 3))
    append(tmp_path / "logs" / "a.log", lines("a", 5, 5))
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    assert len(fake_producer.records("b")) == 7
    agent.stop()


def test_cluster_report_and_problems(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    config = agent_config(tmp_path, cluster={"zk": "zk1:2181/logferry/live"})
    topics = [TopicCheck("logs", 4, []), TopicCheck("web", 2, [1]), TopicCheck("_audit", 0, [])]
    found = ClusterCheck({2: "h2:9093", 1: "h1:9092"}, topics, True)
    text = format_cluster(config, found)
    assert text == [
        "cluster (ZooKeeper zk1:2181/logferry/live): 2 live brokers: 1 at h1:9092, 2 at h2:9093",
        "  topic logs: 4 partitions, all with a leader",
        "  topic web: 2 partitions; no leader right now for partition(s) 1 (their messages wait for one)",
        "  topic _audit: does not exist yet; the brokers create it at the agent's first send (auto_create_topics)",
    ]
    assert cluster_problems(found) == []
    assert cluster_problems(found._replace(auto_create=None)) == []
    (problem,) = cluster_problems(found._replace(auto_create=False))
    assert problem.startswith("topic _audit does not exist and the brokers do not create")


def test_removed_then_added_back_before_its_acks_came_in(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    """Two reloads within one acknowledgement: the file goes on as the same file."""
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path, [source(tmp_path, "app", "*.log")])
    agent = start(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    fake_producer.hold = True
    append(log, lines("a", 10, 10))
    wait_until(lambda: fake_producer.pending, 5, "a chunk in flight")
    agent.reload(agent_config(tmp_path, [source(tmp_path, "app", "*.none")]))
    assert len(agent.agent.inventory.leaving) == 1
    agent.reload(config)
    assert not agent.agent.inventory.leaving
    append(log, lines("a", 10, 20))
    fake_producer.release()
    wait_until(lambda: len(fake_producer.records("logs")) >= 30, 5, "all")
    time.sleep(0.3)
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 30)
    agent.stop()


def test_a_file_rotated_while_its_source_was_removed_is_finished_when_it_comes_back(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path, [source(tmp_path, "app", "*.log")])
    agent = start(config)
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    agent.reload(agent_config(tmp_path, [source(tmp_path, "other", "*.none")]))
    wait_until(lambda: not agent.agent.inventory.leaving, 5, "dormant")
    append(log, lines("a", 5, 10))
    os.rename(log, log.with_name("app.log.1"))  # no pattern matches the new name
    log.write_bytes(lines("b", 3))
    time.sleep(0.5)  # the watchdog events are seen (and ignored) before the reload
    agent.reload(config)
    wait_until(lambda: len(fake_producer.records("logs")) >= 18, 5, "finished, then the new")
    time.sleep(0.3)
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 15) + expected("b", 3)
    agent.stop()


def test_a_renamed_source_resumes_its_files_at_the_next_start(tmp_path: Path, run_agent, fake_producer) -> None:
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    first = run_agent(agent_config(tmp_path, [source(tmp_path, "old-name", "*.log")]))
    wait_until(lambda: len(fake_producer.records("logs")) == 10)
    first.stop()
    append(log, lines("a", 5, 10))
    second = run_agent(agent_config(tmp_path, [source(tmp_path, "new-name", "*.log")]))
    wait_until(lambda: len(fake_producer.records("logs")) >= 15)
    time.sleep(0.3)
    assert [r["line"] for r in fake_producer.records("logs")] == expected("a", 15)
    second.stop()


def test_changed_fields_and_parse_rule_apply_from_the_next_message(
    tmp_path: Path, start: Callable[[AgentConfig], Reloadable], fake_producer
) -> None:
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(b'{"a": 1}\n')
    agent = start(agent_config(tmp_path, [source(tmp_path, "app", "*.log", fields={"env": "old"})]))
    wait_until(lambda: len(fake_producer.records("logs")) == 1)
    agent.reload(
        agent_config(tmp_path, [source(tmp_path, "app", "*.log", fields={"env": "new"}, parse={"format": "json"})])
    )
    append(log, b'{"a": 2}\n')
    wait_until(lambda: len(fake_producer.records("logs")) == 2)
    first, second = fake_producer.records("logs")
    assert first["fields"] == {"env": "old"}
    assert second["fields"] == {"env": "new", "a": 2}
    agent.stop()
