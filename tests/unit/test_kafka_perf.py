"""Parsing Apache Kafka's ProducerPerformance and ConsumerPerformance output
(benchmarks/peers/kafka_perf.py), on text in the tools' own formats (Kafka 4.4's
format strings); no JVM is started."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from benchmarks import vs_kafka

# vs_kafka put benchmarks/ on sys.path and imported the peer as ``peers.kafka_perf``.
kafka_perf: ModuleType = sys.modules[vs_kafka.kafka_perf.__name__]

PRODUCER_OUTPUT = """\
12617 records sent, 2523.4 records/sec (0.48 MB/sec), 1240.8 ms avg latency, 2007.0 ms max latency.
20000 records sent, 3904.724326 records/sec (0.74 MB/sec), 1301.21 ms avg latency, 2409.00 ms max latency, \
1250 ms 50th, 2300 ms 95th, 2390 ms 99th, 2405 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-29 19:50:01:123, 2026-11-29 19:50:04:456, 3.8147, 1.1445, 20000, 6000.6001, 3012, 321, 11.8838, 62305.2960
"""


def test_the_producer_summary_is_the_last_line_with_percentiles() -> None:
    records, rate, latency = kafka_perf.parse_producer(PRODUCER_OUTPUT)
    assert records == 20_000
    assert rate == pytest.approx(3904.724326)
    assert latency == {"avg": 1301.21, "p50": 1250, "p99": 2390, "p99.9": 2405, "max": 2409}


def test_a_producer_run_without_its_summary_fails_quoting_the_output() -> None:
    periodic_only = PRODUCER_OUTPUT.splitlines()[0]
    with pytest.raises(kafka_perf.CaseFailed, match="no summary line:\n12617 records sent"):
        kafka_perf.parse_producer(periodic_only)


def test_the_consumer_summary_is_read_by_column_name() -> None:
    summary = kafka_perf.parse_consumer("some log line\n" + CONSUMER_OUTPUT)
    assert summary["data.consumed.in.nMsg"] == 20_000
    assert summary["nMsg.sec"] == pytest.approx(6000.6001)
    assert summary["rebalance.time.ms"] == 3012
    assert summary["fetch.nMsg.sec"] == pytest.approx(62305.296)


@pytest.mark.parametrize(
    "output",
    [
        "",
        CONSUMER_OUTPUT.splitlines()[0],  # the header without its line of values
        "WARNING: Exiting before consuming the expected number of records: timeout (10000 ms) exceeded.",
        CONSUMER_OUTPUT.replace(", 20000,", ", many,"),
    ],
)
def test_a_consumer_run_without_a_readable_summary_fails(output: str) -> None:
    with pytest.raises(kafka_perf.CaseFailed, match="ConsumerPerformance printed no summary"):
        kafka_perf.parse_consumer(output)


def test_a_tool_run_is_timed_by_the_tools_own_rate() -> None:
    run = kafka_perf.ToolRun(20_000, 4_000.0, {}, client_cpu=3.0, wall=9.0)
    assert run.seconds == 5.0


def test_the_tools_get_the_heap_of_kafkas_perf_scripts_and_no_other() -> None:
    heaps = [option for option in kafka_perf.TOOL_JVM_OPTIONS if option.startswith("-Xm")]
    assert heaps == ["-Xmx512M"]


def test_cases_are_chosen_by_group_and_a_wrong_name_is_named() -> None:
    assert vs_kafka.selected_groups("rf3, librdkafka") == ["librdkafka", "rf3"]
    with pytest.raises(ValueError, match="unknown java"):
        vs_kafka.selected_groups("librdkafka,java")
    with pytest.raises(ValueError, match=r"\(none given\)"):
        vs_kafka.selected_groups(" , ")


def test_each_round_writes_one_topic_per_producer_case_and_consumers_read_theirs() -> None:
    cases = [case for group in vs_kafka.GROUPS.values() for case in group]
    producers = {case.name for case in cases if case.reads is None}
    assert all(case.reads in producers for case in cases if case.reads is not None)
    topics = [vs_kafka.topic_of("run1", name) for name in producers]
    assert len(set(topics)) == len(topics)
    assert vs_kafka.topic_of("run1", vs_kafka.JAVA_PRODUCE_ALL) == "run1-producerperformance-acks-all"
