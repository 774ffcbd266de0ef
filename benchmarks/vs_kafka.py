"""logferry and Apache Kafka side by side: the same Kafka client against both brokers.

Starts Apache Kafka 4.4 (a KRaft single node, benchmarks/peers/apache_kafka.py) and
logferry (ZooKeeper and one broker with its Kafka listener, as benchmarks/kafka_clients.py
starts it) on 127.0.0.1, both for the whole run, and times the same librdkafka
(confluent-kafka) cases on each:

  producer acks=1     N values of 200 bytes into a fresh one-partition topic, librdkafka's
                      default linger (5 ms) and batching, from the first produce() until
                      flush() returns (the client connects and learns the partition's
                      leader before the clock starts)
  producer acks=all   the same with acks=all (one replica on each side)
  consumer            the acks=all topic read back from its start until N arrived
                      (assign, no group; the settings of benchmarks/kafka_clients.py),
                      from assign() on (metadata first, untimed)

Each case runs on both systems back to back, and the system that goes first swaps every
round, so that both see the same machine over the same minutes. Every case is checked,
untimed: after a producer case the partition, read back to its end, must hold exactly N
messages (nothing lost, nothing doubled), and the consumer must get N; a case that does
not fails the run. An untimed warm-up round
(--warmup messages through every case) comes first: the JVM needs it.

Prints ``run N: <system> <case> <rate> msgs/s`` per case and round, with the CPU each
broker process and this client process used per message, then per case the median of
each system and the ratio logferry / Kafka (above 1: logferry is faster).

Durability, as each system ships: Apache Kafka acknowledges (acks=1 and acks=all alike
with one replica) and exposes a message once it is written to the page cache, and never
fsyncs per message; logferry acknowledges after the append too (acks does not wait for
an fsync) and exposes it after its group-commit fsync, which follows at once.

    .venv/bin/python benchmarks/vs_kafka.py --messages 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (HERE, REPO):  # the peers package lives next to this script; benchmarks.harness
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers.apache_kafka import HEAP, ApacheKafka, unavailable_reason  # noqa: E402
from peers.base import CaseFailed, PeerUnavailable  # noqa: E402

from benchmarks.harness import LocalCluster  # noqa: E402
from benchmarks.paper_experiment import deferred_signals  # noqa: E402

VALUE = b"x" * 200
KAFKA = "Apache Kafka"
LOGFERRY = "logferry"
PRODUCE_1 = "producer acks=1"
PRODUCE_ALL = "producer acks=all"
CONSUME = "consumer"
CASES = (PRODUCE_1, PRODUCE_ALL, CONSUME)
MIN_RATE = 2_000.0
"""msgs/s below which a case is declared stuck: it bounds every case in time."""
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def say(text: str) -> None:
    """Progress on stdout, flushed."""
    print(text, flush=True)


# --- the systems ----------------------------------------------------------------------


@dataclass
class Side:
    """One broker under test, as the cases see it: a Kafka bootstrap and a process."""

    name: str
    bootstrap: str
    pid: int
    """The broker process whose CPU time is charged to the cases."""
    durability: str

    def create_topic(self, topic: str) -> None:
        """One partition, one replica, through Kafka's CreateTopics (untimed). The admin
        client lives for this call only: one left over would outlive the brokers and
        log a refused connection a second until the process exits."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30, request_timeout=30)
        try:
            futures[topic].result(timeout=60)
        except KafkaException as exc:
            raise CaseFailed(f"{self.name}: creating {topic}: {exc}") from None


@contextlib.contextmanager
def started_systems(workdir: Path) -> Iterator[list[Side]]:
    """Apache Kafka and logferry, each in a folder of ``workdir``; both are stopped on
    the way out, whatever happens (Ctrl-C and SIGTERM are held meanwhile)."""
    kafka = ApacheKafka()
    kafka.ensure_installed()
    stack = contextlib.ExitStack()
    try:
        began = time.monotonic()
        stack.callback(kafka.stop)
        kafka.start(workdir / "apache-kafka")
        say(f"{KAFKA} started in {time.monotonic() - began:.1f} s on {kafka.bootstrap} (pid {kafka.pid})")
        began = time.monotonic()
        cluster = stack.enter_context(LocalCluster(workdir / "logferry", kafka={"listen": "127.0.0.1:0"}))
        broker = cluster.brokers[0]
        assert broker.proc is not None
        say(
            f"{LOGFERRY} started in {time.monotonic() - began:.1f} s "
            f"on {broker.kafka_address()} (pid {broker.proc.pid})"
        )
        yield [
            Side(KAFKA, kafka.bootstrap, kafka.pid, f"{HEAP} heap; acked and visible when written, no fsync"),
            Side(
                LOGFERRY,
                broker.kafka_address(),
                broker.proc.pid,
                "acked when written, visible after its group-commit fsync",
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


def count_messages(side: Side, topic: str, at_least: int, timeout: float) -> int:
    """Read the partition from its start to its end (untimed) and count the messages:
    what the broker holds. Offsets cannot count them: logferry's Kafka offsets are byte
    positions (docs/kafka.md, "Offsets"). The end is librdkafka's partition EOF; an EOF
    before ``at_least`` messages (logferry exposes a message after its fsync, a moment
    after the acknowledgement) is waited past until ``timeout``."""
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
    give_up = time.monotonic() + timeout
    while True:
        meta = client.list_topics(topic, timeout=10).topics.get(topic)
        partition = None if meta is None or meta.error is not None else meta.partitions.get(0)
        if partition is not None and partition.leader >= 0:
            return
        if time.monotonic() > give_up:
            raise CaseFailed(f"{side.name} {topic}: no leader after {timeout:.0f} s")
        time.sleep(0.05)


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


def run_case(side: Side, case: str, topic: str, n: int) -> Outcome:
    """One case on one system, bounded in time, its counts checked."""
    timeout = max(60.0, n / MIN_RATE)
    if case != CONSUME:
        side.create_topic(topic)  # before the CPU count: not the case's work
    broker_before, client_before = cpu_seconds(side.pid), time.process_time()
    if case == CONSUME:
        seconds, counted = consume(side, topic, n, timeout)
    else:
        seconds = produce(side, topic, n, "1" if case == PRODUCE_1 else "all", timeout)
    broker_cpu, client_cpu = cpu_seconds(side.pid) - broker_before, time.process_time() - client_before
    if case != CONSUME:
        counted = count_messages(side, topic, n, timeout)
        if counted != n:
            raise CaseFailed(f"{side.name} {case}: sent {n}, the partition holds {counted}")
    return Outcome(seconds, counted, broker_cpu, client_cpu)


def run_round(
    sides: list[Side],
    n: int,
    label: str,
    results: dict[tuple[str, str], list[Outcome]] | None,
    report: Callable[[str], None] = say,
) -> None:
    """Every case on every side; each case on both sides back to back."""
    prefix = label.replace(" ", "")  # "run 1" -> topics run1-acks-1, run1-acks-all
    for case in CASES:
        for side in sides:
            acks = "all" if case == CONSUME else case.rsplit("=", 1)[1]  # the consumer reads the acks=all topic
            topic = f"{prefix}-acks-{acks}"
            outcome = run_case(side, case, topic, n)
            if results is None:
                continue
            results.setdefault((side.name, case), []).append(outcome)
            report(
                f"{label}: {side.name} {case} {n / outcome.seconds:,.0f} msgs/s "
                f"(broker CPU {outcome.broker_cpu / n * 1e6:.2f} us/msg, client CPU "
                f"{outcome.client_cpu / n * 1e6:.2f} us/msg; counted {outcome.counted:,})"
            )


def run(
    sides: list[Side], n: int, rounds: int, warmup: int, report: Callable[[str], None] = say
) -> dict[tuple[str, str], list[Outcome]]:
    """The warm-up, then ``rounds`` rounds, the first system swapped every round."""
    results: dict[tuple[str, str], list[Outcome]] = {}
    if warmup:
        run_round(sides, warmup, "warmup", None, report)
    for number in range(1, rounds + 1):
        order = sides if number % 2 else sides[::-1]
        run_round(order, n, f"run {number}", results, report)
    return results


def table(results: dict[tuple[str, str], list[Outcome]], n: int, rounds: int) -> list[str]:
    """Per case, each system's median msgs/s and broker CPU, and logferry / Kafka."""
    lines = [
        f"{n:,} values of {len(VALUE)} B, one partition, librdkafka, median of {rounds} round(s)",
        f"| case | {KAFKA} msgs/s | {LOGFERRY} msgs/s | {LOGFERRY} / Kafka "
        f"| broker CPU us/msg, Kafka | broker CPU us/msg, {LOGFERRY} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in CASES:
        kafka, ours = results.get((KAFKA, case)), results.get((LOGFERRY, case))
        if not kafka or not ours:
            continue
        rate_k = statistics.median(n / o.seconds for o in kafka)
        rate_l = statistics.median(n / o.seconds for o in ours)
        cpu_k = statistics.median(o.broker_cpu / n * 1e6 for o in kafka)
        cpu_l = statistics.median(o.broker_cpu / n * 1e6 for o in ours)
        lines.append(f"| {case} | {rate_k:,.0f} | {rate_l:,.0f} | {rate_l / rate_k:.2f} | {cpu_k:.2f} | {cpu_l:.2f} |")
    return lines


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per case and round")
    parser.add_argument(
        "--rounds", "--runs", type=int, default=3, help="rounds; the table shows medians (--runs: for ab_compare.py)"
    )
    parser.add_argument("--warmup", type=int, default=50_000, help="untimed messages per case before round 1")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--messages and --rounds must be at least 1, --warmup at least 0")
    reason = unavailable_reason()
    if reason is not None:  # a skip, as paper_experiment.py skips a peer: not a failure
        say(reason)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    say(
        f"vs_kafka: {args.messages:,} messages x {args.rounds} round(s), warm-up {args.warmup:,}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="logferry-vs-kafka-") as tmp, started_systems(Path(tmp)) as sides:
            results = run(sides, args.messages, args.rounds, args.warmup)
            durability = [f"{side.name}: {side.durability}" for side in sides]
    except PeerUnavailable as exc:
        say(f"FAILED to start: {exc}")
        return 1
    except CaseFailed as exc:
        say(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted: both brokers are stopped and their data deleted")
        return 130
    say("")
    for line in [*table(results, args.messages, args.rounds), *durability]:
        say(line)
    say(f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
