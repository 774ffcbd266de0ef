"""MirrorMaker 2 against logferry's mirror: each system's own mirror between two of its
own clusters, the same records, one run, alternated round by round.

Four single-node clusters on 127.0.0.1, started once per run: two Apache Kafka 4.4
KRaft nodes (benchmarks/peers/apache_kafka.py, 1 GiB heap each) and two logferry
clusters (a broker with its Kafka listener and a ZooKeeper each, as
benchmarks/vs_kafka.py starts them). Per round and system:

1. a fresh topic of ``--partitions`` partitions on the source, filled untimed with N
   records of 200 bytes (librdkafka, acks=all, record i into partition i mod P, its
   number in its first 10 bytes), until the source's end offsets count N;
2. the mirror is started as a process of its own, and the clock runs from its start
   until the target topic's end offsets (ListOffsets, polled every 50 ms) count N:
   - Apache Kafka: MirrorMaker 2 4.3.1 in dedicated mode (MirrorSourceConnector in a
     Connect worker, one task; benchmarks/peers/mirrormaker2.py), ``connect-mirror-
     maker.sh``'s heap (-Xms256M -Xmx2G) and ``kafka-run-class.sh``'s G1 options, the
     rest MM2's defaults; target topic ``<alias>.<topic>``, aliases new every round so
     that no round inherits Connect state;
   - logferry: ``python -m mirror`` (``logferry mirror``) with its defaults (mode
     ``preserve``: byte-identical copy at the same offsets, target acks=1), a new
     group every round; target topic of the same name;
3. the mirror's CPU (user+system from /proc, its start included) and peak RSS (VmHWM)
   are read while it is still running, then it is killed; the target is read back
   (untimed) with librdkafka, as is the source, and must hold exactly the source's
   records, partition by partition in the source's order, none twice, none missing
   (the source must hold them in the order produced: its producer is idempotent): a
   miss fails the run, saying where the order first differs.

Two times per case: start to N (the JVM's or the interpreter's start, group join and
topic discovery included: what a mirror restart costs) and first to N (from the first
record seen on the target: the copy itself); rates are N over each. The brokers' CPU
(source and target) over the case is shown too.

What each mirror guarantees (printed with the results): MirrorMaker 2 in its default
mode is at least once (it commits source positions every offset.flush.interval.ms; a
killed MM2 copies again from the last commit: duplicates, no gaps), order kept per
partition, the target's offsets its own; logferry's mirror in its default mode
(preserve) copies each batch to the same byte offset and resumes from the target's own
log end, so a killed mirror copies nothing twice and skips nothing (docs/mirror.md),
order kept per partition. This script times the copy; it does not kill the mirrors.

    .venv/bin/python benchmarks/vs_kafka_mirror.py --messages 200000 --rounds 3
    .venv/bin/python benchmarks/vs_kafka_mirror.py --messages 5000 --rounds 1     # a check
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
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

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers import mirrormaker2  # noqa: E402
from peers.apache_kafka import JVM_OPTIONS, ApacheKafka  # noqa: E402
from peers.apache_kafka import unavailable_reason as kafka_unavailable  # noqa: E402
from peers.base import CaseFailed, PeerUnavailable  # noqa: E402

from benchmarks.harness import LocalCluster  # noqa: E402
from benchmarks.paper_experiment import deferred_signals  # noqa: E402
from benchmarks.vs_kafka import KAFKA, LOGFERRY, cpu_seconds, peak_rss_mib, say  # noqa: E402

SIZE = 200
MM2_JVM_OPTIONS = (*mirrormaker2.HEAP_OPTIONS, *(option for option in JVM_OPTIONS if not option.startswith("-Xm")))
"""connect-mirror-maker.sh's heap, kafka-run-class.sh's G1 options (as the broker's)."""
LOGFERRY_GUARANTEE = (
    "logferry mirror (mode preserve, its default): exactly once across restarts (each batch appended at its "
    "source byte offset, "
    "resumed from the target's own log end: a killed mirror copies nothing twice and skips nothing), "
    "order kept per partition, the target's offsets the source's; target acks=1"
)
MIN_RATE = 1_000.0
"""msgs/s below which a copy is declared stuck (bounds every case in time)."""
START_SLACK = 120.0
"""Seconds a mirror may take to start (a JVM on a busy machine) beyond N / MIN_RATE."""
POLL = 0.05


def copy_rate(n: int, copy: Copy) -> str:
    """N over first-to-N, or "-" when one poll saw the first record and the N at once."""
    span = copy.to_all - copy.to_first
    return f"{n / span:,.0f}" if span > 0 else "-"


def value(i: int) -> bytes:
    """Record ``i``: its number in 10 digits, padded to 200 bytes."""
    return b"%010d" % i + b"x" * (SIZE - 10)


def sequence(payload: bytes) -> int:
    return int(payload[:10])


@dataclass
class MirrorSide:
    """One system: its two clusters and how its mirror starts."""

    name: str
    source: str
    """Kafka bootstrap of the source cluster."""
    target: str
    broker_pids: list[int]
    """Every broker process of both clusters (their CPU is shown beside the mirror's)."""
    guarantee: str
    start_mirror: Callable[[str, int, Path], subprocess.Popen[bytes]]
    """(source topic, round, folder) -> the mirror process."""
    target_topic: Callable[[str, int], str]
    """(source topic, round) -> the topic the mirror writes on the target."""


@dataclass
class Copy:
    """One mirror's copy of N records."""

    to_first: float
    """Seconds from the mirror's start to the first record on the target."""
    to_all: float
    """Seconds from the mirror's start until the target held N."""
    mirror_cpu: float
    broker_cpu: float
    rss_mib: float


def logferry_mirror(source_zk: str, target_zk: str) -> Callable[[str, int, Path], subprocess.Popen[bytes]]:
    def start(topic: str, number: int, folder: Path) -> subprocess.Popen[bytes]:
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "mirror.toml"
        config.write_text(
            f'[source]\nzk_connect = "{source_zk}"\n\n[target]\nzk_connect = "{target_zk}"\n\n'
            f'[mirror]\ngroup = "bench-mirror-{number}"\ntopics = ["{topic}"]\n\n[metrics]\nport = 0\n'
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
        with (folder / "mirror.log").open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "mirror", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    return start


def mm2_mirror(source: str, target: str) -> Callable[[str, int, Path], subprocess.Popen[bytes]]:
    def start(topic: str, number: int, folder: Path) -> subprocess.Popen[bytes]:
        config = mirrormaker2.properties(source, target, topic, f"src{number}", f"dst{number}")
        return mirrormaker2.start(folder, config, f"dst{number}", MM2_JVM_OPTIONS)

    return start


@contextlib.contextmanager
def started_systems(workdir: Path) -> Iterator[list[MirrorSide]]:
    """Two Apache Kafka nodes and two logferry clusters; all stopped on the way out."""
    stack = contextlib.ExitStack()
    try:
        kafkas = []
        for role in ("source", "target"):
            kafka = ApacheKafka()
            kafka.ensure_installed()
            began = time.monotonic()
            stack.callback(kafka.stop)
            kafka.start(workdir / f"kafka-{role}")
            say(f"{KAFKA} {role} started in {time.monotonic() - began:.1f} s on {kafka.bootstrap}")
            kafkas.append(kafka)
        clusters = []
        for role, chroot in (("source", "/live"), ("target", "/analysis")):
            began = time.monotonic()
            cluster = stack.enter_context(
                LocalCluster(workdir / f"logferry-{role}", chroot=chroot, kafka={"listen": "127.0.0.1:0"})
            )
            say(
                f"{LOGFERRY} {role} started in {time.monotonic() - began:.1f} s on {cluster.brokers[0].kafka_address()}"
            )
            clusters.append(cluster)
        yield [
            MirrorSide(
                KAFKA,
                kafkas[0].bootstrap,
                kafkas[1].bootstrap,
                kafkas[0].pids + kafkas[1].pids,
                f"MirrorMaker 2 {mirrormaker2.VERSION} (its default mode): {mirrormaker2.GUARANTEE}",
                mm2_mirror(kafkas[0].bootstrap, kafkas[1].bootstrap),
                lambda topic, number: f"src{number}.{topic}",
            ),
            MirrorSide(
                LOGFERRY,
                clusters[0].brokers[0].kafka_address(),
                clusters[1].brokers[0].kafka_address(),
                clusters[0].broker_pids() + clusters[1].broker_pids(),
                LOGFERRY_GUARANTEE,
                logferry_mirror(clusters[0].zk_connect, clusters[1].zk_connect),
                lambda topic, _number: topic,
            ),
        ]
    finally:
        with deferred_signals():
            stack.close()


def ends(consumer: Consumer, topic: str, partitions: int) -> int:
    """Messages the topic holds (high minus low watermark, every partition)."""
    total = 0
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    return total


def fill(side: MirrorSide, topic: str, n: int, partitions: int, timeout: float) -> None:
    """Create ``topic`` on the source and produce the N records (untimed), until the
    source shows them all (logferry exposes them after its fsync)."""
    admin = AdminClient({"bootstrap.servers": side.source})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(timeout=60)
    except KafkaException as exc:
        raise CaseFailed(f"{side.name}: creating {topic}: {exc}") from None
    # idempotent: a retried request cannot reorder the source (the copy is checked against it)
    producer = Producer(
        {
            "bootstrap.servers": side.source,
            "acks": "all",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value(i), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(timeout):
        raise CaseFailed(f"{side.name} {topic}: records unacknowledged after {timeout:.0f} s")
    consumer = Consumer({"bootstrap.servers": side.source, "group.id": "fill-check"})
    try:
        give_up = time.monotonic() + 30
        while (held := ends(consumer, topic, partitions)) != n:
            if time.monotonic() > give_up:
                raise CaseFailed(f"{side.name} {topic}: the source holds {held} of {n}")
            time.sleep(0.05)
    finally:
        consumer.close()


def copy(side: MirrorSide, topic: str, number: int, n: int, partitions: int, folder: Path) -> Copy:
    """Start the mirror, time it until the target holds N, read its cost, kill it."""
    target_topic = side.target_topic(topic, number)
    timeout = START_SLACK + n / MIN_RATE
    watcher = Consumer({"bootstrap.servers": side.target, "group.id": "mirror-watch"})
    brokers_before = sum(cpu_seconds(pid) for pid in side.broker_pids)
    t0 = time.monotonic()
    mirror = side.start_mirror(topic, number, folder)
    try:
        first = None
        held = 0
        while True:
            now = time.monotonic()
            if mirror.poll() is not None:
                raise CaseFailed(
                    f"{side.name} mirror exited ({mirror.returncode}) with {held} of {n} copied; {log_tail(folder)}"
                )
            if now - t0 > timeout:
                raise CaseFailed(f"{side.name} mirror: {held} of {n} copied after {timeout:.0f} s; {log_tail(folder)}")
            if target_topic in watcher.list_topics(timeout=10).topics:
                with contextlib.suppress(KafkaException):  # a topic just created: leaders not known yet
                    held = ends(watcher, target_topic, partitions)
                if held and first is None:
                    first = now
                if held >= n:
                    done = now  # the poll's own time, as ``first``: equal when one poll saw it all
                    break
            time.sleep(POLL)
        mirror_cpu, rss = cpu_seconds(mirror.pid), peak_rss_mib(mirror.pid)
        broker_cpu = sum(cpu_seconds(pid) for pid in side.broker_pids) - brokers_before
    finally:
        watcher.close()
        # Killed, not stopped: nothing of the mirror is measured after, and a clean stop of
        # MM2's Connect worker takes seconds (tests/integration/test_kafka_mirrormaker2.py).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(mirror.pid, signal.SIGKILL)
        mirror.wait()
    assert first is not None
    return Copy(first - t0, done - t0, mirror_cpu, broker_cpu, rss)


def log_tail(folder: Path) -> str:
    """The last lines of the mirror's log, for a failure's message."""
    for log in (folder / "mm2.log", folder / "mirror.log"):
        if log.exists():
            return "its log ends: " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
    return "no log"


def read_back(bootstrap: str, topic: str, n: int, partitions: int) -> dict[int, list[int]]:
    """Every record's number in ``topic``, per partition in offset order (untimed): read
    from the start until N arrived and an idle second more showed no more (a duplicate
    would come after the N)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-verify", "enable.auto.commit": False})
    got: dict[int, list[int]] = {p: [] for p in range(partitions)}
    try:
        consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        total, quiet_until = 0, None
        give_up = time.monotonic() + 60 + n / 20_000
        while time.monotonic() < give_up:
            batch = consumer.consume(10_000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    raise CaseFailed(f"{topic} on {bootstrap}: reading it back: {msg.error()}")
                got[msg.partition()].append(sequence(msg.value()))
            total += len(batch)
            if not batch and total >= n:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return got


def differences(seen: list[int], wanted: list[int]) -> str:
    """How ``seen`` differs from ``wanted``: duplicates, missing, or the first place
    where the order differs."""
    extra, missing = len(seen) - len(set(seen)), len(set(wanted) - set(seen))
    if extra or missing:
        return f"{len(seen)} records, {len(wanted)} wanted: {extra} duplicates, {missing} missing"
    at = next(i for i, (a, b) in enumerate(zip(seen, wanted, strict=True)) if a != b)
    return f"the same {len(seen)} records, out of order from offset {at} (record {seen[at]} where {wanted[at]} was)"


def verify(side: MirrorSide, topic: str, target_topic: str, n: int, partitions: int) -> None:
    """The source holds the records in the order produced (record i in partition
    i mod P: the fill's producer is idempotent, so no retry reorders them), and the
    target's copy holds exactly the source's records, partition by partition, in the
    source's order."""
    source = read_back(side.source, topic, n, partitions)
    target = read_back(side.target, target_topic, n, partitions)
    for p in range(partitions):
        if source[p] != list(range(p, n, partitions)):
            why = differences(source[p], list(range(p, n, partitions)))
            raise CaseFailed(f"{side.name} source {topic} partition {p} (the fill, not the mirror): {why}")
        if target[p] != source[p]:
            raise CaseFailed(f"{side.name} {target_topic} partition {p}: {differences(target[p], source[p])}")


def run(
    sides: list[MirrorSide], n: int, rounds: int, partitions: int, workdir: Path, logs: Path | None = None
) -> dict[str, list[Copy]]:
    """``rounds`` rounds, the first system swapped every round; ``logs``: a folder the
    mirrors' logs are copied into (they are deleted with the run's folder otherwise)."""
    results: dict[str, list[Copy]] = {}
    for number in range(1, rounds + 1):
        order = sides if number % 2 else sides[::-1]
        topic = f"run{number}-mirror"
        for side in order:
            fill(side, topic, n, partitions, 60 + n / 10_000)
            folder = workdir / f"{side.name.split()[-1]}-{number}"
            try:
                outcome = copy(side, topic, number, n, partitions, folder)
                verify(side, topic, side.target_topic(topic, number), n, partitions)
            finally:
                if logs is not None:
                    logs.mkdir(parents=True, exist_ok=True)
                    for log in folder.glob("*.log"):
                        shutil.copy(log, logs / f"{folder.name}-{log.name}")
            results.setdefault(side.name, []).append(outcome)
            say(
                f"run {number}: {side.name} mirror {n / outcome.to_all:,.0f} msgs/s start to N "
                f"({outcome.to_all:.1f} s), {copy_rate(n, outcome)} msgs/s "
                f"first to N (first record after {outcome.to_first:.1f} s); mirror CPU {outcome.mirror_cpu:.1f} s "
                f"({outcome.mirror_cpu / n * 1e6:.1f} us/msg), peak RSS {outcome.rss_mib:,.0f} MiB; brokers' CPU "
                f"{outcome.broker_cpu / n * 1e6:.1f} us/msg; target holds exactly {n:,}, in order"
            )
    return results


def table(results: dict[str, list[Copy]], n: int, rounds: int) -> list[str]:
    lines = [
        f"{n:,} records of {SIZE} B, median of {rounds} round(s)",
        "| mirror | start to N, msgs/s | first to N, msgs/s | start to first record, s "
        "| mirror CPU, us/msg | mirror peak RSS, MiB | brokers' CPU, us/msg |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, copies in results.items():
        med = statistics.median
        lines.append(
            f"| {name} | {med(n / c.to_all for c in copies):,.0f} "
            f"| {spans(n, copies)} "
            f"| {med(c.to_first for c in copies):.1f} | {med(c.mirror_cpu / n * 1e6 for c in copies):.1f} "
            f"| {med(c.rss_mib for c in copies):,.0f} | {med(c.broker_cpu / n * 1e6 for c in copies):.1f} |"
        )
    return lines


def spans(n: int, copies: list[Copy]) -> str:
    """The median first-to-N rate of the copies whose first and last poll differ."""
    rates = [n / (c.to_all - c.to_first) for c in copies if c.to_all > c.to_first]
    return f"{statistics.median(rates):,.0f}" if rates else "-"


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="records per copy")
    parser.add_argument("--rounds", "--runs", type=int, default=3, help="rounds; the table shows medians")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the mirrored topic")
    parser.add_argument("--logs", type=Path, help="copy the mirrors' logs into this folder")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.partitions < 1:
        parser.error("--messages, --rounds and --partitions must be at least 1")
    reason = kafka_unavailable() or mirrormaker2.unavailable_reason()
    if reason is not None:  # a skip, as vs_kafka.py skips: not a failure
        say(reason)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    say(
        f"vs_kafka_mirror: {args.messages:,} records x {args.rounds} round(s), {args.partitions} partitions; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    try:
        with (
            tempfile.TemporaryDirectory(prefix="logferry-vs-kafka-mirror-") as tmp,
            started_systems(Path(tmp)) as sides,
        ):
            results = run(sides, args.messages, args.rounds, args.partitions, Path(tmp) / "mirrors", args.logs)
    except PeerUnavailable as exc:
        say(f"FAILED to start: {exc}")
        return 1
    except CaseFailed as exc:
        say(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted: every broker and mirror is stopped and its data deleted")
        return 130
    say("")
    for line in table(results, args.messages, args.rounds):
        say(line)
    for side in sides:
        say(side.guarantee)
    say(f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
