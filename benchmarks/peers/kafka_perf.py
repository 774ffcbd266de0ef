"""Apache Kafka's own load tools, ``ProducerPerformance`` and ``ConsumerPerformance``
(``org.apache.kafka.tools``, what ``kafka-producer-perf-test.sh`` and
``kafka-consumer-perf-test.sh`` run), as a JVM per call against any Kafka bootstrap,
their summaries parsed.

They are what Kafka's users run to size a cluster, so a comparison with them measures
the broker under Kafka's Java client, not under librdkafka. Each call is one JVM, with
what the shell scripts pass: a 512 MiB heap (``KAFKA_HEAP_OPTS=-Xmx512M`` in both
scripts) and ``kafka-run-class.sh``'s performance options (G1,
``MaxGCPauseMillis=20``, ...). The jars are Apache Kafka's folder
(:mod:`broker.testing.kafka_jars`), the one the broker peer runs from.

Parsing is separate from running (:func:`parse_producer`, :func:`parse_consumer`): the
tools' output is the contract, tested without a JVM in tests/unit/test_kafka_perf.py.
A summary missing from the output, or one that counts another number of records than
asked for, is a :class:`peers.base.CaseFailed` naming the tool and quoting its output.
"""

from __future__ import annotations

import math
import re
import resource
import subprocess
import time
from dataclasses import dataclass

from peers.apache_kafka import JVM_OPTIONS, MIN_JAVA
from peers.base import CaseFailed, PeerUnavailable

from broker.testing.jvm import java_executable
from broker.testing.kafka_jars import classpath

TOOL_HEAP = "-Xmx512M"
"""The heap ``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh`` set."""
TOOL_JVM_OPTIONS = (TOOL_HEAP, *(option for option in JVM_OPTIONS if not option.startswith("-Xm")))
PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"

# The producer's final line (Kafka 4.x ProducerPerformance.Stats.printTotal):
# "20000 records sent, 41152.3 records/sec (7.85 MB/sec), 101.43 ms avg latency,
#  352.00 ms max latency, 95 ms 50th, 300 ms 95th, 340 ms 99th, 350 ms 99.9th."
_PRODUCER_TOTAL = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \([\d.]+ MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\."
)
CONSUMER_FIELDS = ("data.consumed.in.nMsg", "nMsg.sec", "rebalance.time.ms", "fetch.time.ms", "fetch.nMsg.sec")
"""The columns of ConsumerPerformance's summary this module reads."""


@dataclass(frozen=True)
class ToolRun:
    """One tool's run as the tool reported it, and what it cost this machine."""

    records: int
    """Records the tool says it sent or consumed."""
    rate: float
    """Records per second by the tool's own clock: the producer's from its first send
    to its last acknowledgement; the consumer's fetch rate, its group join (the
    rebalance) left out, as librdkafka's consumer case leaves out its start-up."""
    latency_ms: dict[str, float]
    """The producer's send-to-acknowledgement latency (avg, p50, p99, p99.9, max);
    empty for the consumer."""
    client_cpu: float
    """User plus system CPU seconds of the tool's JVM, its start included."""
    wall: float
    """Seconds from the JVM's launch to its exit."""

    @property
    def seconds(self) -> float:
        """The records over the tool's rate: its own timed span."""
        return self.records / self.rate if self.rate > 0 else float("inf")


def parse_producer(output: str) -> tuple[int, float, dict[str, float]]:
    """(records, records/s, latencies in ms) from ProducerPerformance's stdout: its last
    summary line (the periodic lines have no percentiles and are skipped)."""
    found = list(_PRODUCER_TOTAL.finditer(output))
    if not found:
        raise CaseFailed(f"ProducerPerformance printed no summary line:\n{_tail(output)}")
    last = found[-1]
    latency = {name: float(last[group]) for name, group in _LATENCY_GROUPS}
    return int(last["records"]), float(last["rate"]), latency


_LATENCY_GROUPS = (("avg", "avg"), ("p50", "p50"), ("p99", "p99"), ("p99.9", "p999"), ("max", "max"))


def parse_consumer(output: str) -> dict[str, float]:
    """The summary of ConsumerPerformance's stdout, by column name (only
    :data:`CONSUMER_FIELDS`): a header line of comma-separated names, then one line of
    values (the first two are dates without commas)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time,"):
            names = [name.strip() for name in line.split(",")]
            values = [value.strip() for value in lines[i + 1].split(",")]
            if len(values) != len(names):
                break
            row = dict(zip(names, values, strict=True))
            try:
                return {name: float(row[name]) for name in CONSUMER_FIELDS}
            except (KeyError, ValueError):
                break
    raise CaseFailed(f"ConsumerPerformance printed no summary (a header and a line of values):\n{_tail(output)}")


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(nothing)"


def _run(main_class: str, args: list[str], timeout: float) -> tuple[str, float, float]:
    """Run one tool to its end; (stdout, its CPU seconds, wall seconds). A tool that
    fails or outlives ``timeout`` is a CaseFailed with its last output lines."""
    java = java_executable()
    if java is None:
        raise PeerUnavailable(f"Kafka's tools need Java {MIN_JAVA}+: none found")
    command = [str(java), *TOOL_JVM_OPTIONS, "-cp", classpath(), main_class, *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        raise CaseFailed(f"{main_class.rsplit('.', 1)[1]} ran past {timeout:.0f} s:\n{_tail(output)}") from None
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise CaseFailed(
            f"{main_class.rsplit('.', 1)[1]} exited with {done.returncode}:\n{_tail(done.stdout + done.stderr)}"
        )
    return done.stdout + done.stderr, cpu, wall


def producer_performance(
    bootstrap: str, topic: str, records: int, size: int, acks: str | None, timeout: float
) -> ToolRun:
    """``ProducerPerformance`` sending ``records`` records of ``size`` bytes as fast as it
    can (``--throughput -1``) with ``acks`` (None: the Java producer's default, "all");
    its other settings are the Java producer's defaults (linger 5 ms, 16 KiB batches,
    idempotent unless acks is set to something else than "all")."""
    settings = [] if acks is None else ["--command-property", f"acks={acks}"]
    output, cpu, wall = _run(
        PRODUCER,
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            "--throughput",
            "-1",
            *settings,
        ],
        timeout,
    )
    sent, rate, latency = parse_producer(output)
    if sent != records:
        raise CaseFailed(f"ProducerPerformance to {topic} on {bootstrap}: asked for {records}, sent {sent}")
    return ToolRun(sent, rate, latency, cpu, wall)


def consumer_performance(bootstrap: str, topic: str, records: int, group: str, timeout: float) -> ToolRun:
    """``ConsumerPerformance`` reading ``records`` records of ``topic`` from its start in
    the consumer group ``group`` (subscribe, the classic group protocol: the join
    happens on the broker under test too). It gives up after 10 s without a record
    (its default ``--timeout``); fewer records than asked for is a CaseFailed."""
    output, cpu, wall = _run(
        CONSUMER,
        ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records), "--group", group],
        timeout,
    )
    summary = parse_consumer(output)
    got = int(summary["data.consumed.in.nMsg"])
    if got != records:
        raise CaseFailed(f"ConsumerPerformance on {topic} at {bootstrap}: read {got} of {records} records")
    rate = summary["fetch.nMsg.sec"]
    if not 0 < rate < math.inf:  # a fetch time of 0 ms: Java divides to Infinity or NaN
        rate = summary["nMsg.sec"]
    return ToolRun(got, rate, {}, cpu, wall)
