"""benchmarks/vs_kafka.py counts every message on both systems: a short run against a
real Apache Kafka (a KRaft node from benchmarks/peers/apache_kafka.py) and a real
logferry broker, checking counts, not timing them: librdkafka's cases, Kafka's Java
tools (ProducerPerformance acks=all, ConsumerPerformance) on both, logferry's native
client, and one short end-to-end latency run per row. The 3-broker case is not run
here (three more JVMs): tests/unit/test_apache_kafka_peer.py checks its configuration.

Skipped, saying what to run, when Java or Apache Kafka's jars are missing
(scripts/install-bench-deps.sh resolves them from Maven Central)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import vs_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

N = 3_000


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[list[vs_kafka.Side]]:
    """Apache Kafka and logferry, always stopped afterwards."""
    reason = vs_kafka.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with vs_kafka.started_systems(tmp_path) as started:
        yield started


def test_the_harness_counts_every_message_on_both_systems(sides: list[vs_kafka.Side]) -> None:
    lines: list[str] = []
    results = vs_kafka.run(sides, N, rounds=1, warmup=0, report=lines.append)
    for side in sides:
        for case in vs_kafka.CASES:
            assert [o.counted for o in results[(side.name, case)]] == [N], (side.name, case)
    assert len(lines) == len(sides) * len(vs_kafka.CASES)
    assert all(line.startswith("run 1: ") and " msgs/s " in line for line in lines)
    rows = vs_kafka.table(results, N, 1)[3:]
    assert [row.split(" | ")[0] for row in rows] == [f"| {case}" for case in vs_kafka.CASES]

    # Kafka's Java tools against both brokers, counted the same way: ProducerPerformance
    # (acks=all) and ConsumerPerformance, a JVM each. Left out, to spare CI two JVMs a
    # side: ProducerPerformance acks=1 (the same tool; its parsing is
    # tests/unit/test_kafka_perf.py's) and "own client" on Kafka (these same tools).
    java_cases = vs_kafka.GROUPS["java-tools"][1:]
    own_cases = vs_kafka.GROUPS["own-clients"]
    lines.clear()
    results = vs_kafka.run(sides, N, rounds=1, warmup=0, report=lines.append, cases=java_cases)
    logferry = [side for side in sides if side.name == vs_kafka.LOGFERRY]
    results.update(vs_kafka.run(logferry, N, rounds=1, warmup=0, report=lines.append, cases=own_cases))
    expected = [(side.name, case.name) for side in sides for case in java_cases]
    expected += [(vs_kafka.LOGFERRY, case.name) for case in own_cases]
    assert sorted(results) == sorted(expected)
    for key in expected:
        assert [o.counted for o in results[key]] == [N], key
    assert all(results[(side.name, vs_kafka.JAVA_CONSUME)][0].client_cpu > 0.1 for side in sides)  # the JVM's
    assert len(lines) == len(expected)

    # End-to-end latency, one short run per row (Kafka, logferry visible on write and
    # as shipped): every message sent is received (run_end_to_end raises otherwise).
    latencies = vs_kafka.run_latency(sides, [500], 1.5, 1, lines.append, warmup=False)
    assert sorted(row for row, _rate in latencies) == sorted(row for side in sides for row, _ in side.latency_variants)
    assert all(len(runs) == 1 and runs[0]["max"] >= runs[0]["p50"] > 0 for runs in latencies.values())
    assert all(any(side.memory()) for side in sides)

    # The checks are not vacuous: one message fewer than expected is a failure. (In
    # this test, not another: pytest-xdist could hand a second test to another worker,
    # which would start both brokers again.)
    for side in sides:
        topic = f"short-{side.name.split()[-1].lower()}"
        side.create_topic(topic)
        vs_kafka.produce(side, topic, 100, "all", timeout=30)
        assert vs_kafka.count_messages(side, topic, 100, timeout=30) == 100
        with pytest.raises(vs_kafka.CaseFailed, match="read 100 of 101"):
            vs_kafka.consume(side, topic, 101, timeout=3)
