"""The runtime loop in-process with a fake producer: rotation, truncation, deletion,
backpressure, failed batches, restarts, handle limits, metrics. Milliseconds each."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import msgpack
import pytest

from tests.agent.conftest import FakeProducer, agent_config, wait_until
from tests.support.metrics import promtool_check


@pytest.fixture(autouse=True)
def _logs_dir(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()


def lines(prefix: str, n: int, start: int = 0) -> bytes:
    return b"".join(b"%s %05d\n" % (prefix.encode(), i) for i in range(start, start + n))


def got(producer: FakeProducer, topic: str = "logs") -> list[str]:
    return [r["line"] for r in producer.records(topic)]


def test_rename_rotation_finishes_old_file_first(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    config = agent_config(tmp_path)
    log.write_bytes(lines("a", 100))
    agent = run_agent(config)
    wait_until(lambda: len(got(fake_producer)) == 100)
    with open(log, "ab") as handle:
        handle.write(lines("a", 50, 100))
    os.rename(log, log.with_name("app.log.1"))  # not matched by *.log: only the handle
    log.write_bytes(lines("b", 30))
    wait_until(lambda: len(got(fake_producer)) == 180)
    assert got(fake_producer) == [f"a {i:05d}" for i in range(150)] + [f"b {i:05d}" for i in range(30)]
    assert agent.agent.metrics.counters["rotations"] == 1
    wait_until(lambda: agent.agent.metrics.gauges["open_files"] == 1, 5, "rotated file closed")
    agent.stop()


def test_copytruncate_restarts_at_zero(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 100))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(got(fake_producer)) == 100)
    os.truncate(log, 0)
    with open(log, "ab") as handle:
        handle.write(lines("b", 10))
    wait_until(lambda: len(got(fake_producer)) == 110)
    assert got(fake_producer)[100:] == [f"b {i:05d}" for i in range(10)]
    assert agent.agent.metrics.counters["truncations"] == 1
    agent.stop()


def test_truncated_and_rewritten_past_position_is_caught_by_fingerprint(
    tmp_path: Path, run_agent, fake_producer
) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(got(fake_producer)) == 10)
    with open(log, "r+b") as handle:  # same inode, new content, longer than before
        handle.truncate(0)
        handle.write(lines("B", 20))
    wait_until(lambda: len(got(fake_producer)) == 30)
    assert got(fake_producer)[10:] == [f"B {i:05d}" for i in range(20)]
    agent.stop()


def test_deleted_file_is_drained_then_closed_and_forgotten(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    fake_producer.hold = True
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(fake_producer.pending) == 1)
    log.unlink()
    fake_producer.release()
    inventory = agent.agent.inventory
    wait_until(
        lambda: agent.agent.metrics.gauges["open_files"] == 0 and not inventory.files and not inventory.draining,
        5,
        "closed",
    )
    agent.stop()
    state = json.loads((tmp_path / "state" / "checkpoint.json").read_text())
    assert state["files"] == []


def test_backpressure_caps_in_flight_and_resumes(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("x" * 150, 20_000))  # about 3.2 MB
    cap = 512 * 1024
    fake_producer.hold = True
    agent = run_agent(
        agent_config(
            tmp_path,
            max_inflight_bytes=cap,
            read_chunk_bytes=64 * 1024,
            sources=[{"pattern": f"{tmp_path}/logs/*.log", "topic": "logs", "max_line_bytes": 4096}],
        )
    )
    wait_until(lambda: agent.agent.metrics.counters["backpressure_waits"] > 0)
    sent = agent.agent.metrics.counters["messages_sent"]
    assert 0 < sent < 20_000
    assert agent.agent.metrics.gauges["inflight_bytes_max"] <= cap
    fake_producer.release()
    wait_until(lambda: len(got(fake_producer)) == 20_000, 20)
    assert agent.agent.metrics.gauges["inflight_bytes_max"] <= cap
    assert got(fake_producer) == [f"{'x' * 150} {i:05d}" for i in range(20_000)]
    agent.stop()


def test_failed_batch_is_sent_again_from_the_checkpoint(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    fake_producer.fail_next = 1
    log.write_bytes(lines("a", 5))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(got(fake_producer)) == 5, 10)
    assert got(fake_producer) == [f"a {i:05d}" for i in range(5)]
    assert agent.agent.metrics.counters["rewinds"] == 1
    assert agent.agent.metrics.counters["messages_failed"] == 5
    agent.stop()


def test_a_refused_acl_keeps_the_lines_until_it_is_granted(tmp_path: Path, run_agent, fake_producer) -> None:
    """Three refusals of the same chunk by the authorizer drop nothing: an operator
    grants the ACL and the lines follow (only a corrupt or too-large batch is dropped)."""
    from broker.common.errors import TopicAuthorizationFailedError

    log = tmp_path / "logs" / "app.log"
    fake_producer.error_factory = lambda: TopicAuthorizationFailedError(
        "User:ANONYMOUS may not produce to topic 'logs'"
    )
    fake_producer.fail_topic = "logs"  # a heartbeat must not take one of the refusals
    fake_producer.fail_next = 3
    log.write_bytes(lines("a", 5))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(got(fake_producer)) == 5, 20)
    assert got(fake_producer) == [f"a {i:05d}" for i in range(5)]
    assert agent.agent.metrics.counters["rewinds"] == 3
    assert agent.agent.metrics.counters.get("messages_dropped", 0) == 0
    agent.stop()


def test_a_batch_refused_three_times_as_too_large_is_dropped_and_counted(
    tmp_path: Path, run_agent, fake_producer
) -> None:
    from broker.common.errors import MessageTooLargeError

    log = tmp_path / "logs" / "app.log"
    fake_producer.error_factory = lambda: MessageTooLargeError("batch too large")
    fake_producer.fail_topic = "logs"
    fake_producer.fail_next = 3
    log.write_bytes(lines("a", 5))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: agent.agent.metrics.counters.get("messages_dropped", 0) == 5, 20)
    with open(log, "ab") as handle:
        handle.write(lines("b", 2))
    wait_until(lambda: len(got(fake_producer)) == 2, 20)
    assert got(fake_producer) == [f"b {i:05d}" for i in range(2)]
    agent.stop()


def test_restart_resumes_from_checkpoint_and_new_file_with_reused_identity(
    tmp_path: Path, run_agent, fake_producer
) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path)
    first = run_agent(config)
    wait_until(lambda: len(got(fake_producer)) == 10)
    first.stop()
    with open(log, "ab") as handle:
        handle.write(lines("a", 5, 10))
    second_producer = FakeProducer()
    second = run_agent(config, second_producer)
    wait_until(lambda: len(got(second_producer)) == 5)
    second.stop()
    assert got(second_producer) == [f"a {i:05d}" for i in range(10, 15)]
    # Same inode, different content written while the agent was down.
    with open(log, "r+b") as handle:
        handle.truncate(0)
        handle.write(lines("Z", 40))
    third_producer = FakeProducer()
    third = run_agent(config, third_producer)
    wait_until(lambda: len(got(third_producer)) == 40)
    third.stop()
    assert got(third_producer)[0] == "Z 00000"


def test_rotation_while_stopped_is_finished_from_its_new_name(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path)
    first = run_agent(config)
    wait_until(lambda: len(got(fake_producer)) == 10)
    first.stop()
    with open(log, "ab") as handle:
        handle.write(lines("a", 5, 10))
    os.rename(log, log.with_name("app.log.1"))
    log.write_bytes(lines("b", 3))
    os.utime(log.with_name("app.log.1"), (1, 1))  # older: finished first
    producer = FakeProducer()
    second = run_agent(config, producer)
    wait_until(lambda: len(got(producer)) == 8)
    second.stop()
    assert got(producer) == [f"a {i:05d}" for i in range(10, 15)] + [f"b {i:05d}" for i in range(3)]
    records = producer.records("logs")
    assert {r["file"] for r in records} == {str(log)}


def test_partial_line_waits_for_timeout(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(b"one\ntw")
    config = agent_config(
        tmp_path, sources=[{"pattern": f"{tmp_path}/logs/*.log", "topic": "logs", "partial_line_timeout_s": 0.5}]
    )
    agent = run_agent(config)
    wait_until(lambda: got(fake_producer) == ["one"])
    with open(log, "ab") as handle:
        handle.write(b"o")
    wait_until(lambda: got(fake_producer) == ["one", "two"], 5)
    agent.stop()


def test_start_at_end_skips_existing_lines_only(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(b"old 1\nold 2\npartial")
    config = agent_config(tmp_path, sources=[{"pattern": f"{tmp_path}/logs/*.log", "topic": "logs", "start_at": "end"}])
    agent = run_agent(config)
    wait_until(lambda: agent.agent.snapshot.state == "running", 5, "agent started")
    with open(log, "ab") as handle:
        handle.write(b" done\nnew\n")
    (tmp_path / "logs" / "later.log").write_bytes(b"from the start\n")
    wait_until(lambda: len(got(fake_producer)) == 3)
    assert sorted(got(fake_producer)) == ["from the start", "new", "partial done"]
    agent.stop()


def test_handle_limit_with_many_files(tmp_path: Path, run_agent, fake_producer) -> None:
    for i in range(300):
        (tmp_path / "logs" / f"f{i:03d}.log").write_bytes(lines(f"f{i:03d}", 2))
    agent = run_agent(agent_config(tmp_path, max_open_files=16))
    wait_until(lambda: len(got(fake_producer)) == 600, 20)
    assert agent.agent.metrics.gauges["open_files"] <= 16
    by_file: dict[str, list[int]] = {}
    for record in fake_producer.records("logs"):
        by_file.setdefault(record["file"], []).append(record["offset"])
    assert all(offsets == [0, 11] for offsets in by_file.values()) and len(by_file) == 300
    agent.stop()


@pytest.mark.integration  # runs promtool as a process
def test_metrics_endpoint_status_file_and_audit(tmp_path: Path, run_agent, fake_producer) -> None:
    (tmp_path / "logs" / "app.log").write_bytes(lines("a", 7))
    config = agent_config(tmp_path, metrics={"port": 0}, audit={"window_s": 1})
    agent = run_agent(config)
    wait_until(lambda: len(got(fake_producer)) == 7)
    wait_until(
        lambda: json.loads((tmp_path / "state" / "status.json").read_text())["counters"]["messages_acked"] == 7, 5
    )
    url = json.loads((tmp_path / "state" / "status.json").read_text())["metrics_url"]
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    assert 'logferry_agent_messages_acked_total{host="test-host"} 7' in text
    assert "logferry_agent_file_lag_bytes{" in text
    promtool_check(text)
    status = json.loads(urllib.request.urlopen(f"{url}/status", timeout=5).read())
    assert status["state"] == "running" and status["files"][0]["lag"] == 0
    wait_until(lambda: fake_producer.records("_audit"), 5, "audit record")
    agent.stop()
    audit = fake_producer.records("_audit")
    assert sum(r["acked"] for r in audit) == 7 and all(r["stage"] == "agent" for r in audit)
    values = [msgpack.unpackb(v) for topic, vals, _key, _future in fake_producer.sent for v in vals if topic == "logs"]
    assert values and {r["host"] for r in audit} == {"test-host"}
