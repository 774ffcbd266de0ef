"""The pure parts of the latency method (benchmarks/e2e.py) and of the paper
experiment's report (benchmarks/peers/report.py): stamps, pacing, percentiles, the
warm-up cut, and the verdicts against the issue's targets. No server is started."""

from __future__ import annotations

import time
from array import array
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.e2e import (
    STAMP,
    LatencyRecorder,
    StampedMessages,
    counted,
    median_percentiles,
    percentiles,
)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_percentiles_are_nearest_rank_in_ms() -> None:
    values = [i * 1_000_000 for i in range(1, 1001)]  # 1 ms .. 1000 ms
    got = percentiles(list(reversed(values)))
    assert got == {"p50": 501.0, "p99": 991.0, "p99.9": 1000.0, "max": 1000.0}


def test_percentiles_refuse_an_empty_run() -> None:
    with pytest.raises(ValueError):
        percentiles([])


def test_median_percentiles_take_each_point_apart() -> None:
    runs = [
        {"p50": 1.0, "p99": 9.0, "p99.9": 10.0, "max": 30.0},
        {"p50": 3.0, "p99": 5.0, "p99.9": 20.0, "max": 10.0},
        {"p50": 2.0, "p99": 7.0, "p99.9": 15.0, "max": 20.0},
    ]
    assert median_percentiles(runs) == {"p50": 2.0, "p99": 7.0, "p99.9": 15.0, "max": 20.0}


def test_stamped_messages_carry_sequence_and_send_time_padded_to_size() -> None:
    before = time.monotonic_ns()
    messages = list(StampedMessages(rate=1e6, count=3, size=200))
    assert [m.seq for m in messages] == [0, 1, 2]
    for message in messages:
        assert len(message.value) == 200
        seq, sent = STAMP.unpack_from(message.value)
        assert (seq, sent) == (message.seq, message.sent_ns)
        assert sent >= before


def test_stamped_messages_hold_the_rate() -> None:
    began = time.monotonic()
    assert len(list(StampedMessages(rate=200, count=21, size=16))) == 21
    assert time.monotonic() - began >= 0.1  # 20 intervals of 5 ms


def test_stamped_messages_refuse_a_size_below_the_stamp() -> None:
    with pytest.raises(ValueError):
        StampedMessages(rate=10, count=1, size=STAMP.size - 1)


def test_recorder_files_each_latency_under_its_sequence_number() -> None:
    recorder = LatencyRecorder(3)
    sent = time.monotonic_ns() - 5_000_000
    recorder.record(STAMP.pack(2, sent) + b"x")
    recorder.record(STAMP.pack(0, sent))
    assert recorder.seen == 2
    assert recorder.latencies[1] == 0
    assert recorder.latencies[0] >= 5_000_000 and recorder.latencies[2] >= 5_000_000


def test_counted_drops_the_warm_up_second() -> None:
    latencies = array("q", range(2500))
    assert counted(latencies, rate=1000) == list(range(1000, 2500))


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/peers/report.py, imported as the experiment imports it."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import peers.report

    return peers.report


def _results(report: ModuleType, rates: dict[str, float], p99: dict[str, float]) -> object:
    results = report.Results(messages=1000, runs=1, latency_rate=1000, latency_seconds=10)
    results.systems = list(rates)
    for system, rate in rates.items():
        for case in report.CASES:
            results.add_time(system, case, 1000 / rate)
    for system, value in p99.items():
        results.add_latency(system, {"p50": value / 2, "p99": value, "p99.9": value * 2, "max": value * 3})
    return results


def test_ratio_targets_are_multiples_for_paper_peers_and_ahead_for_modern(report: ModuleType) -> None:
    results = _results(report, {"logferry": 100_000, "RabbitMQ": 10_000, "NATS JetStream": 100_000}, {})
    rows = "\n".join(report.ratio_table(results))
    consume = [line for line in rows.splitlines() if report.CONSUME in line]
    assert any("RabbitMQ" in line and "10.00x" in line and "yes" in line for line in consume)
    # equal is not ahead
    assert any("NATS JetStream" in line and "1.00x" in line and line.rstrip(" |").endswith("no") for line in consume)


def test_latency_verdict_compares_with_the_best_peer(report: ModuleType) -> None:
    results = _results(
        report,
        {"logferry": 1, "Redis Streams": 1, "ActiveMQ": 1},
        {"logferry": 3.0, "Redis Streams": 1.0, "ActiveMQ": 40.0},
    )
    verdict = report.latency_verdict(results)
    assert "3.00x the best peer's (Redis Streams" in verdict and verdict.endswith("not met")
    results.latency["logferry"] = [{"p50": 1.0, "p99": 2.0, "p99.9": 3.0, "max": 4.0}]
    assert report.latency_verdict(results).endswith(": met")
    assert any("Redis Streams" in line for line in report.latency_table(results))


def test_latency_verdict_has_a_line_per_logferry_setting(report: ModuleType) -> None:
    results = _results(report, {"logferry": 1, "Redis Streams": 1}, {"logferry": 3.0, "Redis Streams": 1.0})
    written = "logferry (visibility=written)"
    results.add_latency(written, {"p50": 0.5, "p99": 1.5, "p99.9": 3.0, "max": 4.0})
    mine, other = report.latency_verdict(results).splitlines()
    assert mine.startswith("logferry p99 3.00 ms = 3.00x") and mine.endswith("not met")
    assert other.startswith(f"{written} p99 1.50 ms = 1.50x") and other.endswith(": met")
    table = report.latency_table(results)
    assert any(line.startswith(f"| {written}") for line in table)  # a row of its own
    assert table[-1] == other


def test_ab_compare_reads_latency_lines_as_one_case_per_percentile() -> None:
    from benchmarks.ab_compare import rates_of

    out = (
        "run 1: 10,000 msgs/s acks=1   RF 1  end-to-end p50 1.54 p99 3.17 p99.9 5.44 "
        "max 7.02 ms; ack p50 0.44 p99 1.19 ms\n"
        "  run 1: produce batch 1 (acks=0)          122,974 msgs/s   CPU ns/msg client 7,000 "
        "broker   900\n"
    )
    got = rates_of(out)
    assert got["10,000 msgs/s acks=1 RF 1 e2e p99 ms"] == 3.17
    assert got["10,000 msgs/s acks=1 RF 1 e2e p99.9 ms"] == 5.44
    assert got["10,000 msgs/s acks=1 RF 1 ack p50 ms"] == 0.44
    assert got["produce batch 1 (acks=0)"] == 122_974
    assert got["produce batch 1 (acks=0) broker CPU ns/msg"] == 900
    assert got["produce batch 1 (acks=0) client CPU ns/msg"] == 7_000
    assert len(got) == 9


def test_ab_compare_reads_kafka_clients_cpu_per_message() -> None:
    from benchmarks.ab_compare import rates_of

    got = rates_of("run 0: confluent-kafka consumer 370,219 msgs/s (broker CPU 0.30 us/msg, client CPU 1.55 us/msg)\n")
    assert got == {
        "confluent-kafka consumer": 370_219,
        "confluent-kafka consumer broker CPU ns/msg": 300,
        "confluent-kafka consumer client CPU ns/msg": 1550,
    }
