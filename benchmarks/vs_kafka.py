"""logferry and Apache Kafka side by side: the same clients against both brokers.

Starts Apache Kafka 4.4 (KRaft, benchmarks/peers/apache_kafka.py) and logferry
(ZooKeeper and brokers with their Kafka listener, as benchmarks/kafka_clients.py starts
them) on 127.0.0.1, each once per run and configuration, and times the same cases on
each. The cases, by group (``--cases``, comma separated; all by default):

librdkafka (confluent-kafka), 200-byte values, one partition:
  producer acks=1     N values into a fresh topic, librdkafka's default linger (5 ms)
                      and batching, from the first produce() until flush() returns
                      (the client connects and learns the partition's leader before
                      the clock starts)
  producer acks=all   the same with acks=all (one replica on each side)
  consumer            the acks=all topic read back from its start until N arrived
                      (assign, no group; the settings of benchmarks/kafka_clients.py),
                      from assign() on (metadata first, untimed)

java-tools: Apache Kafka's own ProducerPerformance (acks=1, then acks=all: the Java
  producer's default, idempotent) and ConsumerPerformance (a consumer group, the acks=all
  topic), a JVM each (benchmarks/peers/kafka_perf.py); the rate is the tool's own
  figure (the consumer's without its group join)

own-clients: what each system's own users get: on Apache Kafka ProducerPerformance and
  ConsumerPerformance with the Java client's defaults; on logferry its native client,
  ``Producer`` with its defaults, one send() per value, and ``SimpleConsumer.messages``

latency: end-to-end latency p50/p99/p99.9/max at --latency-rates (1,000 and 10,000
  msgs/s), librdkafka producer (linger 1 ms, acks=1) and consumer in another process
  (benchmarks/e2e.py's measurement, benchmarks/peers/kafka_latency.py's client), on
  Apache Kafka, on logferry with ``visibility = "written"`` (visible once appended,
  before the fsync, as Kafka) and on logferry as it ships (visible after its fsync)

rf3: 3 brokers on each side (3 KRaft nodes; 3 logferry brokers and ZooKeeper), a topic
  of replication factor 3, the librdkafka producer with acks=all; these clusters are
  started after the single nodes are stopped

Each rate case runs on both systems back to back, and the system that goes first swaps
every round, so that both see the same machine over the same minutes. Every case is
checked, untimed: after a producer case the partition, read back to its end with
librdkafka, must hold exactly N messages (nothing lost, nothing doubled), a consumer
must get N, and every latency run must receive every message it sent; a case that does
not fails the run. An untimed warm-up round (--warmup messages through every rate case)
comes first: the JVM needs it.

Prints ``run N: <system> <case> <rate> msgs/s`` per case and round, with the CPU each
broker process (all of them, for 3 brokers) and the client used per message, then per
case the median of each system and the ratio logferry / Kafka (above 1: logferry is
faster), the latency table, and the peak resident memory (VmHWM) of every broker
process (and logferry's ZooKeeper) at the end of each configuration.

Durability, as each system ships: Apache Kafka acknowledges (acks=1 and acks=all alike
with one replica) and exposes a message once it is written to the page cache, and never
fsyncs per message; logferry acknowledges after the append too (acks does not wait for
an fsync) and exposes it after its group-commit fsync, which follows at once.

    .venv/bin/python benchmarks/vs_kafka.py --messages 200000 --rounds 3
    .venv/bin/python benchmarks/vs_kafka.py --cases java-tools,own-clients --messages 20000 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (HERE, REPO):  # the peers package lives next to this script; benchmarks.harness
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers import kafka_perf  # noqa: E402
from peers.apache_kafka import HEAP, ApacheKafka, unavailable_reason  # noqa: E402
from peers.base import CaseFailed, PeerUnavailable  # noqa: E402
from peers.kafka_latency import wait_for_leader as _leader_known  # noqa: E402

from benchmarks.harness import LocalCluster, run_main  # noqa: E402
from benchmarks.paper_experiment import deferred_signals  # noqa: E402
from benchmarks.vs_kafka_latency import LATENCY_RATES, LatencyResults, latency_table, run_latency  # noqa: E402
from broker.client import Admin, SimpleConsumer  # noqa: E402
from broker.client import Producer as NativeProducer  # noqa: E402

VALUE = b"x" * 200
KAFKA = "Apache Kafka"
LOGFERRY = "logferry"
PRODUCE_1 = "producer acks=1"
PRODUCE_ALL = "producer acks=all"
CONSUME = "consumer"
CASES = (PRODUCE_1, PRODUCE_ALL, CONSUME)
"""The librdkafka cases (the group ``librdkafka``)."""
JAVA_PRODUCE_1 = "ProducerPerformance acks=1"
JAVA_PRODUCE_ALL = "ProducerPerformance acks=all"
JAVA_CONSUME = "ConsumerPerformance"
OWN_PRODUCE = "own client producer"
OWN_CONSUME = "own client consumer"
RF3_PRODUCE = "3 brokers RF 3 producer acks=all"


@dataclass(frozen=True)
class Case:
    """One rate case: its name, and for a consumer the producer case whose topic it reads."""

    name: str
    reads: str | None = None
    replicas: int = 1


GROUPS: dict[str, tuple[Case, ...]] = {
    "librdkafka": (Case(PRODUCE_1), Case(PRODUCE_ALL), Case(CONSUME, reads=PRODUCE_ALL)),
    "java-tools": (Case(JAVA_PRODUCE_1), Case(JAVA_PRODUCE_ALL), Case(JAVA_CONSUME, reads=JAVA_PRODUCE_ALL)),
    "own-clients": (Case(OWN_PRODUCE), Case(OWN_CONSUME, reads=OWN_PRODUCE)),
    "latency": (),  # not a rate case: benchmarks/vs_kafka_latency.py
    "rf3": (Case(RF3_PRODUCE, replicas=3),),
}
"""``--cases`` names, in the order they run."""
CLUSTER_GROUPS = frozenset({"rf3"})
"""Groups that run on 3 brokers per side, after the single nodes."""
MIN_RATE = 2_000.0
"""msgs/s below which a case is declared stuck: it bounds every case in time."""
JVM_SLACK = 60.0
"""Seconds a Java tool may take beyond a case's bound: its JVM's start and exit."""
_TICK = os.sysconf("SC_CLK_TCK")
FAILURES: dict[type[Exception], str] = {PeerUnavailable: "FAILED to start", CaseFailed: "FAILED"}
"""How a run fails, for :func:`benchmarks.harness.run_main`: a system did not start; a case miscounted."""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def peak_rss_mib(pid: int) -> float:
    """The peak resident memory (VmHWM) of process ``pid`` so far, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise CaseFailed(f"/proc/{pid}/status has no VmHWM line")


def say(text: str) -> None:
    """Progress on stdout, flushed."""
    print(text, flush=True)


# --- the systems ----------------------------------------------------------------------


@dataclass
class Side:
    """One system under test, as the cases see it: a Kafka bootstrap and its processes."""

    name: str
    bootstrap: str
    pids: list[int]
    """The broker processes whose CPU time is charged to the cases."""
    durability: str
    native: str = ""
    """logferry's native address (host:port of broker 1); empty for Apache Kafka."""
    others: dict[str, int] = field(default_factory=dict)
    """Other processes the system needs, by name (logferry's ZooKeeper), for the memory report."""
    latency_variants: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """The latency case's rows on this system: (row name, the topic's settings)."""

    def create_topic(self, topic: str, replicas: int = 1) -> None:
        """One partition, ``replicas`` replicas, through Kafka's CreateTopics (untimed).
        The admin client lives for this call only: one left over would outlive the
        brokers and log a refused connection a second until the process exits."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, 1, replicas)], operation_timeout=30, request_timeout=30)
        try:
            futures[topic].result(timeout=60)
        except KafkaException as exc:
            raise CaseFailed(f"{self.name}: creating {topic}: {exc}") from None
        if replicas > 1:
            self.wait_for_replicas(topic, replicas, 60.0)

    def wait_for_replicas(self, topic: str, replicas: int, timeout: float) -> None:
        """Until the partition's metadata lists ``replicas`` replicas, all in sync
        (untimed): a case named "RF 3" must run on three copies from its first message."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        give_up = time.monotonic() + timeout
        seen = "no metadata"
        while time.monotonic() < give_up:
            meta = admin.list_topics(topic, timeout=10).topics.get(topic)
            partition = None if meta is None or meta.error is not None else meta.partitions.get(0)
            if partition is not None:
                seen = f"replicas {partition.replicas}, in sync {partition.isrs}"
                if len(partition.replicas) == replicas and len(partition.isrs) == replicas:
                    return
            time.sleep(0.1)
        raise CaseFailed(f"{self.name} {topic}: not {replicas} replicas in sync after {timeout:.0f} s ({seen})")

    def create_latency_topic(self, topic: str, config: dict[str, str]) -> None:
        """A topic for the latency case: through CreateTopics, or with settings only
        logferry's own Admin can give (``visibility``: Kafka's CreateTopics refuses
        it, docs/kafka.md "Configs") through that."""
        if not config:
            self.create_topic(topic)
            return
        if not self.native:
            raise CaseFailed(f"{self.name}: topic settings {config} need logferry's native Admin")
        with Admin(brokers=[self.native]) as admin:
            admin.create_topic(topic, 1, config=config)

    def broker_cpu(self) -> float:
        """CPU seconds of every broker process so far."""
        return sum(cpu_seconds(pid) for pid in self.pids)

    def memory(self) -> list[str]:
        """Each broker's (and helper's) peak RSS so far, as report phrases."""
        brokers = [f"broker {i} {peak_rss_mib(pid):,.0f} MiB" for i, pid in enumerate(self.pids, 1)]
        helpers = [f"{name} {peak_rss_mib(pid):,.0f} MiB" for name, pid in self.others.items()]
        return brokers + helpers


@contextlib.contextmanager
def started_systems(workdir: Path, brokers: int = 1) -> Iterator[list[Side]]:
    """Apache Kafka and logferry, ``brokers`` brokers each, each in a folder of
    ``workdir``; both are stopped on the way out, whatever happens (Ctrl-C and SIGTERM
    are held meanwhile)."""
    kafka = ApacheKafka(nodes=brokers)
    kafka.ensure_installed()
    stack = contextlib.ExitStack()
    try:
        began = time.monotonic()
        stack.callback(kafka.stop)
        kafka.start(workdir / "apache-kafka")
        say(
            f"{KAFKA} ({brokers} node(s)) started in {time.monotonic() - began:.1f} s "
            f"on {kafka.bootstrap} (pids {kafka.pids})"
        )
        began = time.monotonic()
        cluster = stack.enter_context(
            LocalCluster(workdir / "logferry", brokers=brokers, kafka={"listen": "127.0.0.1:0"})
        )
        pids = cluster.broker_pids()
        bootstrap = ",".join(broker.kafka_address() for broker in cluster.brokers)
        zookeeper = cluster.zookeeper.pid
        say(
            f"{LOGFERRY} ({brokers} broker(s)) started in {time.monotonic() - began:.1f} s on {bootstrap} (pids {pids})"
        )
        yield [
            Side(
                KAFKA,
                kafka.bootstrap,
                kafka.pids,
                f"{HEAP} heap per node; acked and visible when written, no fsync"
                + ("; acks=all: once every in-sync replica has it in its page cache" if brokers > 1 else ""),
                latency_variants=[(KAFKA, {})],
            ),
            Side(
                LOGFERRY,
                bootstrap,
                pids,
                "acked when written, visible after its group-commit fsync"
                + (
                    "; acks=all: once every in-sync replica has it (the high watermark, capped by the "
                    "leader's flushed end, docs/replication.md)"
                    if brokers > 1
                    else ""
                ),
                native=cluster.brokers[0].address,
                others={} if zookeeper is None else {"ZooKeeper": zookeeper},
                latency_variants=[
                    (f'{LOGFERRY} visibility="written"', {"visibility": "written"}),
                    (f"{LOGFERRY} as shipped (visible after fsync)", {}),
                ],
            ),
        ]
    finally:
        with deferred_signals():
            stack.close()


# --- the cases ------------------------------------------------------------------------


@dataclass
class Outcome:
    """One case on one system: its time and what was counted."""

    seconds: float
    counted: int
    """Messages the broker holds after a producer case (read back, untimed), or
    messages the consumer received."""
    broker_cpu: float
    client_cpu: float
    """This process's CPU over the case, plus a Java tool's JVM's."""


def count_messages(side: Side, topic: str, at_least: int, timeout: float) -> int:
    """Read the partition from its start to its end (untimed) and count the messages:
    what the broker holds. The end is librdkafka's partition EOF; an EOF before
    ``at_least`` messages (logferry exposes a message after its fsync, a moment after
    the acknowledgement) is waited past until ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": side.bootstrap,
            "group.id": "vs-kafka-count",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, 0, -2)])
        count, at_end = 0, False
        give_up = time.monotonic() + timeout
        while not (at_end and count >= at_least) and time.monotonic() < give_up:
            for msg in consumer.consume(10_000, 0.5):
                error = msg.error()
                if error is None:
                    count += 1
                    at_end = False
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end = True
                else:
                    raise CaseFailed(f"{side.name} {topic}: reading it back: {error}")
        return count
    finally:
        consumer.close()


def wait_for_leader(client: Producer | Consumer, side: Side, topic: str, timeout: float) -> None:
    """Until the client's metadata names a leader for the partition (untimed): a topic
    is created a moment before its case, and a client that starts without its leader
    waits on librdkafka's metadata retry timer, inside the clock, for as long as the
    broker takes to spread the new topic (Kafka's controller does this asynchronously)."""
    try:
        _leader_known(client, topic, timeout)
    except CaseFailed as exc:
        raise CaseFailed(f"{side.name} {exc}") from None


def produce(side: Side, topic: str, n: int, acks: str, timeout: float) -> float:
    """Send ``n`` values, one ``produce`` call each; the seconds until all are acked
    (the client's start-up, connection and metadata, is left out on both systems)."""
    # queue.buffering.max.messages: as benchmarks/kafka_clients.py, so that the loop
    # rarely waits for room; linger and batch size are librdkafka's defaults.
    producer = Producer({"bootstrap.servers": side.bootstrap, "acks": acks, "queue.buffering.max.messages": 1_000_000})
    give_up = time.monotonic() + timeout
    send, poll = producer.produce, producer.poll
    left = n
    try:
        wait_for_leader(producer, side, topic, timeout)
        t0 = time.perf_counter()
        for i in range(n):
            while True:
                try:
                    send(topic, VALUE, partition=0)
                    break
                except BufferError:
                    poll(0.01)
            if i & 0xFFFF == 0 and time.monotonic() > give_up:
                raise CaseFailed(f"{side.name} {topic}: {i} of {n} sent after {timeout:.0f} s")
        left = producer.flush(max(1.0, give_up - time.monotonic()))
        elapsed = time.perf_counter() - t0
    finally:
        if left:  # failed: drop what is queued, so that close() does not wait for it
            producer.purge()
        producer.close()
    if left:
        raise CaseFailed(f"{side.name} {topic}: {left} of {n} messages still unacknowledged after {timeout:.0f} s")
    return elapsed


def consume(side: Side, topic: str, n: int, timeout: float) -> tuple[float, int]:
    """Read the partition from its start until ``n`` messages arrived; the seconds and
    the count (``n``, or :class:`CaseFailed`; the producer case already proved that the
    partition holds exactly ``n``)."""
    # The settings of benchmarks/kafka_clients.py's rd_consume, which says why each.
    consumer = Consumer(
        {
            "bootstrap.servers": side.bootstrap,
            "group.id": "vs-kafka",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 4 << 20,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        count = 0
        # Untimed, as for the producer; assign() without the metadata would also start
        # the partition's offset query on a 500 ms retry timer (benchmarks/kafka_clients.py).
        wait_for_leader(consumer, side, topic, timeout)
        t0 = time.perf_counter()
        give_up = t0 + timeout
        consumer.assign([TopicPartition(topic, 0, -2)])
        while count < n and time.perf_counter() < give_up:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    count += 1
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    if count != n:
        raise CaseFailed(f"{side.name} consumer read {count} of {n} messages from {topic}")
    return elapsed, count


def native_produce(side: Side, topic: str, n: int, timeout: float) -> float:
    """logferry's own ``Producer`` with its defaults (acks=1, linger 5 ms), one
    ``send()`` per value, as a user writes it; the seconds until all are acked (the
    connection and the partition's metadata untimed)."""
    with NativeProducer(brokers=[side.native]) as producer:
        producer.partitions(topic)
        send = producer.send
        t0 = time.perf_counter()
        for _ in range(n):
            send(topic, VALUE, partition=0)
        producer.flush(timeout=timeout)
        elapsed = time.perf_counter() - t0
        stats = producer.metrics()
    if stats["messages_failed"] or stats["messages_acked"] != n:
        raise CaseFailed(
            f"{side.name} native producer {topic}: {stats['messages_acked']:,} of {n:,} acknowledged, "
            f"{stats['messages_failed']:,} failed"
        )
    return elapsed


def native_consume(side: Side, topic: str, n: int) -> tuple[float, int]:
    """logferry's ``SimpleConsumer.messages`` from the partition's start to its visible
    end (the producer case proved it holds ``n``); the seconds and the count."""
    with SimpleConsumer(brokers=[side.native], max_bytes=1 << 20) as consumer:
        consumer.offsets(topic, 0)  # connected, metadata known: untimed
        t0 = time.perf_counter()
        count = 0
        for _ in consumer.messages(topic, 0, "earliest"):
            count += 1
        elapsed = time.perf_counter() - t0
    if count != n:
        raise CaseFailed(f"{side.name} native consumer read {count} of {n} messages from {topic}")
    return elapsed, count


def perform(side: Side, case: str, topic: str, n: int, timeout: float) -> tuple[float, int | None, float]:
    """Run ``case`` on ``side``: (seconds, messages consumed or None for a producer,
    the CPU seconds of a Java tool's JVM)."""
    tool = timeout + JVM_SLACK
    own_java = case in (OWN_PRODUCE, OWN_CONSUME) and side.name == KAFKA
    if case in (PRODUCE_1, PRODUCE_ALL, RF3_PRODUCE):
        return produce(side, topic, n, "1" if case == PRODUCE_1 else "all", timeout), None, 0.0
    if case == CONSUME:
        seconds, got = consume(side, topic, n, timeout)
        return seconds, got, 0.0
    if case in (JAVA_PRODUCE_1, JAVA_PRODUCE_ALL) or (case == OWN_PRODUCE and own_java):
        acks = {JAVA_PRODUCE_1: "1", JAVA_PRODUCE_ALL: "all"}.get(case)
        run = kafka_perf.producer_performance(side.bootstrap, topic, n, len(VALUE), acks, tool)
        return run.seconds, None, run.client_cpu
    if case == JAVA_CONSUME or own_java:
        run = kafka_perf.consumer_performance(side.bootstrap, topic, n, f"vs-kafka-{topic}", tool)
        return run.seconds, run.records, run.client_cpu
    if case == OWN_PRODUCE:
        return native_produce(side, topic, n, timeout), None, 0.0
    if case == OWN_CONSUME:
        seconds, got = native_consume(side, topic, n)
        return seconds, got, 0.0
    raise ValueError(f"unknown case {case!r}")


def run_case(side: Side, case: Case, topic: str, n: int) -> Outcome:
    """One case on one system, bounded in time, its counts checked."""
    timeout = max(60.0, n / MIN_RATE)
    if case.reads is None:
        side.create_topic(topic, case.replicas)  # before the CPU count: not the case's work
    broker_before, client_before = side.broker_cpu(), time.process_time()
    seconds, consumed, jvm_cpu = perform(side, case.name, topic, n, timeout)
    broker_cpu, client_cpu = side.broker_cpu() - broker_before, time.process_time() - client_before + jvm_cpu
    if consumed is None:
        counted = count_messages(side, topic, n, timeout)
        if counted != n:
            raise CaseFailed(f"{side.name} {case.name}: sent {n}, the partition holds {counted}")
    else:
        counted = consumed
    return Outcome(seconds, counted, broker_cpu, client_cpu)


def topic_of(prefix: str, case: str) -> str:
    """The topic a case writes in a round: ``run1-producer-acks-1`` and the like."""
    return f"{prefix}-{re.sub(r'[^a-z0-9]+', '-', case.lower()).strip('-')}"


def run_round(
    sides: list[Side],
    n: int,
    label: str,
    results: dict[tuple[str, str], list[Outcome]] | None,
    report: Callable[[str], None] = say,
    cases: tuple[Case, ...] = GROUPS["librdkafka"],
) -> None:
    """Every case on every side; each case on both sides back to back."""
    prefix = label.replace(" ", "")  # "run 1" -> topics run1-producer-acks-1, ...
    for case in cases:
        for side in sides:
            topic = topic_of(prefix, case.reads or case.name)
            outcome = run_case(side, case, topic, n)
            if results is None:
                continue
            results.setdefault((side.name, case.name), []).append(outcome)
            report(
                f"{label}: {side.name} {case.name} {n / outcome.seconds:,.0f} msgs/s "
                f"(broker CPU {outcome.broker_cpu / n * 1e6:.2f} us/msg, client CPU "
                f"{outcome.client_cpu / n * 1e6:.2f} us/msg; counted {outcome.counted:,})"
            )


def run(
    sides: list[Side],
    n: int,
    rounds: int,
    warmup: int,
    report: Callable[[str], None] = say,
    cases: tuple[Case, ...] = GROUPS["librdkafka"],
) -> dict[tuple[str, str], list[Outcome]]:
    """The warm-up, then ``rounds`` rounds, the first system swapped every round."""
    results: dict[tuple[str, str], list[Outcome]] = {}
    if warmup and cases:
        run_round(sides, warmup, "warmup", None, report, cases)
    for number in range(1, rounds + 1):
        order = sides if number % 2 else sides[::-1]
        run_round(order, n, f"run {number}", results, report, cases)
    return results


def table(
    results: dict[tuple[str, str], list[Outcome]], n: int, rounds: int, cases: tuple[Case, ...] = GROUPS["librdkafka"]
) -> list[str]:
    """Per case, each system's median msgs/s and broker CPU, and logferry / Kafka."""
    lines = [
        f"{n:,} values of {len(VALUE)} B, one partition, median of {rounds} round(s)",
        f"| case | {KAFKA} msgs/s | {LOGFERRY} msgs/s | {LOGFERRY} / Kafka "
        f"| broker CPU us/msg, Kafka | broker CPU us/msg, {LOGFERRY} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        kafka, ours = results.get((KAFKA, case.name)), results.get((LOGFERRY, case.name))
        if not kafka or not ours:
            continue
        rate_k = statistics.median(n / o.seconds for o in kafka)
        rate_l = statistics.median(n / o.seconds for o in ours)
        cpu_k = statistics.median(o.broker_cpu / n * 1e6 for o in kafka)
        cpu_l = statistics.median(o.broker_cpu / n * 1e6 for o in ours)
        lines.append(
            f"| {case.name} | {rate_k:,.0f} | {rate_l:,.0f} | {rate_l / rate_k:.2f} | {cpu_k:.2f} | {cpu_l:.2f} |"
        )
    return lines


def memory_lines(sides: list[Side], brokers: int) -> list[str]:
    """Peak RSS of every broker process (and logferry's ZooKeeper), one line a system."""
    return [f"peak RSS, {brokers} broker(s): {side.name}: " + ", ".join(side.memory()) for side in sides]


def selected_groups(text: str) -> list[str]:
    """``--cases``: group names, comma separated, in :data:`GROUPS`' order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in GROUPS]
    if unknown or not names:
        raise ValueError(f"--cases {text!r}: unknown {', '.join(unknown) or '(none given)'}; use {','.join(GROUPS)}")
    return [name for name in GROUPS if name in names]


@dataclass
class Phase:
    """The cases one configuration (single nodes, or 3 brokers each) runs, and what it gave."""

    brokers: int
    cases: tuple[Case, ...]
    latency: bool = False
    results: dict[tuple[str, str], list[Outcome]] = field(default_factory=dict)
    latencies: LatencyResults = field(default_factory=dict)
    memory: list[str] = field(default_factory=list)
    durability: list[str] = field(default_factory=list)


def run_phase(phase: Phase, workdir: Path, args: argparse.Namespace) -> None:
    """Start both systems with ``phase.brokers`` brokers, run the phase, stop them."""
    with started_systems(workdir, phase.brokers) as sides:
        phase.results = run(sides, args.messages, args.rounds, args.warmup, cases=phase.cases)
        if phase.latency:
            phase.latencies = run_latency(
                sides, args.latency_rates, args.latency_seconds, args.rounds, say, warmup=args.warmup > 0
            )
        phase.memory = memory_lines(sides, phase.brokers)
        phase.durability = [f"{side.name}: {side.durability}" for side in sides]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per case and round")
    parser.add_argument(
        "--rounds", "--runs", type=int, default=3, help="rounds; the table shows medians (--runs: for ab_compare.py)"
    )
    parser.add_argument("--warmup", type=int, default=50_000, help="untimed messages per case before round 1")
    parser.add_argument("--cases", default=",".join(GROUPS), help=f"comma-separated subset of {','.join(GROUPS)}")
    parser.add_argument(
        "--latency-rates", default=",".join(map(str, LATENCY_RATES)), help="msgs/s of the latency case, comma separated"
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="seconds per latency run, the first not counted"
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--messages and --rounds must be at least 1, --warmup at least 0")
    try:
        groups = selected_groups(args.cases)
        args.latency_rates = [int(rate) for rate in args.latency_rates.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    if min(args.latency_rates) < 1 or args.latency_seconds <= 1.0:
        parser.error("--latency-rates must be positive and --latency-seconds above the 1 s warm-up")
    reason = unavailable_reason()
    if reason is not None:  # a skip, as paper_experiment.py skips a peer: not a failure
        say(reason)
        return 0
    say(
        f"vs_kafka: {', '.join(groups)}; {args.messages:,} messages x {args.rounds} round(s), warm-up "
        f"{args.warmup:,}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    single = tuple(case for group in groups if group not in CLUSTER_GROUPS for case in GROUPS[group])
    clustered = tuple(case for group in groups if group in CLUSTER_GROUPS for case in GROUPS[group])
    phases = []
    if single or "latency" in groups:
        phases.append(Phase(1, single, latency="latency" in groups))
    if clustered:
        phases.append(Phase(3, clustered))

    def body() -> None:
        with tempfile.TemporaryDirectory(prefix="logferry-vs-kafka-") as tmp:
            for phase in phases:
                run_phase(phase, Path(tmp) / f"brokers-{phase.brokers}", args)
        for phase in phases:
            say("")
            if phase.cases:
                say(f"{phase.brokers} broker(s) per system:")
                for line in table(phase.results, args.messages, args.rounds, phase.cases):
                    say(line)
            if phase.latency:
                for line in latency_table(phase.latencies, args.rounds):
                    say(line)
            for line in [*phase.memory, *phase.durability]:
                say(line)
        say(f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    return run_main(body, FAILURES, "every broker is stopped and its data deleted", say)


if __name__ == "__main__":
    sys.exit(main())
