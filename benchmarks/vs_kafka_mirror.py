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
order kept per partition.

The ``kill`` case (``--cases kill``) counts what those guarantees give after a kill -9,
for every mirror of each system: MirrorMaker 2 at least once (its defaults, Connect's
60 s offset flush included) and in its exactly-once mode (transactions on the target,
the source read read_committed); logferry's mirror in mode preserve and in mode produce
(the re-producing mirror: resumed from its group's committed positions). Per round and
mirror: a fresh topic filled as above; the mirror started; killed with SIGKILL (its
whole process group) once the target holds N/2; started again at once with the same
configuration (the same aliases or group, so it resumes); the target polled (bounded
in time) until it holds at least N and has not grown for QUIET seconds; then both
topics read back read_committed and the target's records counted against the source's
own order, per partition: duplicates (copies beyond a record's first), gaps (source
records the target lacks), reordered (places where the target's first copies step back
in the source's order). Nothing fails the run but a copy that stalls: the counts are
the result.

    .venv/bin/python benchmarks/vs_kafka_mirror.py --messages 200000 --rounds 3
    .venv/bin/python benchmarks/vs_kafka_mirror.py --cases kill --messages 100000 --rounds 3
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
from dataclasses import astuple, dataclass
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
from peers.base import CaseFailed, free_port  # noqa: E402

from benchmarks.harness import LocalCluster, run_main  # noqa: E402
from benchmarks.paper_experiment import deferred_signals  # noqa: E402
from benchmarks.vs_kafka import FAILURES, KAFKA, LOGFERRY, cpu_seconds, peak_rss_mib, say  # noqa: E402

SIZE = 200
MM2_JVM_OPTIONS = (*mirrormaker2.HEAP_OPTIONS, *(option for option in JVM_OPTIONS if not option.startswith("-Xm")))
"""connect-mirror-maker.sh's heap, kafka-run-class.sh's G1 options (as the broker's)."""
LOGFERRY_GUARANTEE = (
    "logferry mirror (mode preserve, its default): exactly once across restarts (each batch appended at its "
    "source byte offset, "
    "resumed from the target's own log end: a killed mirror copies nothing twice and skips nothing), "
    "order kept per partition, the target's offsets the source's; target acks=1"
)
LOGFERRY_PRODUCE_GUARANTEE = (
    "logferry mirror (mode produce): at least once (resumed from its group's source positions, committed "
    "every commit_interval_ms once the target acknowledged them), order kept per partition, the target's "
    "offsets its own; copied batches keep their producers' ids and sequences"
)
CASE_NAMES = ("rate", "kill")
"""``--cases``: the timed copy, and the kill -9 mid-copy."""
QUIET = 5.0
"""Seconds without growth after which a resumed mirror's target counts as settled
(MirrorMaker 2 commits every second at most; a stalled copy shows as gaps)."""
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


StartMirror = Callable[[str, str, Path], subprocess.Popen[bytes]]
"""(source topic, tag, folder) -> the mirror process; the same tag again resumes the
same mirror (its aliases or group), a new tag starts one from no state."""


@dataclass
class Mirror:
    """One way a system mirrors: its name, what it guarantees, how it starts."""

    name: str
    guarantee: str
    start: StartMirror
    target_topic: Callable[[str, str], str]
    """(source topic, tag) -> the topic the mirror writes on the target."""


@dataclass
class MirrorSide:
    """One system: its two clusters and its mirrors."""

    name: str
    source: str
    """Kafka bootstrap of the source cluster."""
    target: str
    broker_pids: list[int]
    """Every broker process of both clusters (their CPU is shown beside the mirror's)."""
    rate: list[Mirror]
    """The mirrors the rate case times: the system's default first."""
    kill: list[Mirror]
    """The mirrors the kill case runs."""


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


def logferry_mirror(source_zk: str, target_zk: str, mode: str) -> StartMirror:
    """logferry's mirror in ``mode`` (its group named after the tag), everything else its default."""

    def start(topic: str, tag: str, folder: Path) -> subprocess.Popen[bytes]:
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "mirror.toml"
        config.write_text(
            f'[source]\nzk_connect = "{source_zk}"\n\n[target]\nzk_connect = "{target_zk}"\n\n'
            f'[mirror]\ngroup = "bench-mirror-{tag}"\ntopics = ["{topic}"]\nmode = "{mode}"\n\n[metrics]\nport = 0\n'
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


def mm2_mirror(
    source: str, target: str, offset_flush_ms: int | None = 1000, exactly_once: bool = False, tuned: bool = False
) -> StartMirror:
    """MirrorMaker 2 from aliases ``src<tag>`` to ``dst<tag>``, source positions flushed
    every ``offset_flush_ms`` (None: Connect's default, 60 s; the rate case has always
    used 1 s), in its exactly-once mode if ``exactly_once``, with
    :data:`mirrormaker2.TUNED` if ``tuned``; everything else its default."""

    def start(topic: str, tag: str, folder: Path) -> subprocess.Popen[bytes]:
        config = mirrormaker2.properties(
            source,
            target,
            topic,
            f"src{tag}",
            f"dst{tag}",
            offset_flush_ms=offset_flush_ms,
            exactly_once_rest_port=free_port() if exactly_once else None,
            tuned=tuned,
        )
        return mirrormaker2.start(folder, config, f"dst{tag}", MM2_JVM_OPTIONS)

    return start


def mm2_topic(topic: str, tag: str) -> str:
    return f"src{tag}.{topic}"


def same_topic(topic: str, _tag: str) -> str:
    return topic


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
        source, target = kafkas[0].bootstrap, kafkas[1].bootstrap
        mm2 = f"MirrorMaker 2 {mirrormaker2.VERSION}"
        source_zk, target_zk = clusters[0].zk_connect, clusters[1].zk_connect
        logferry_source, logferry_target = (cluster.brokers[0].kafka_address() for cluster in clusters)
        preserve = Mirror(
            "logferry mirror", LOGFERRY_GUARANTEE, logferry_mirror(source_zk, target_zk, "preserve"), same_topic
        )
        yield [
            MirrorSide(
                KAFKA,
                source,
                target,
                kafkas[0].pids + kafkas[1].pids,
                [
                    Mirror(
                        "MirrorMaker 2",
                        f"{mm2} (its default mode, source positions flushed every second): {mirrormaker2.GUARANTEE}",
                        mm2_mirror(source, target),
                        mm2_topic,
                    ),
                    Mirror(
                        "MirrorMaker 2 tuned",
                        f"{mm2} as the rate case's, with mirrormaker2.TUNED: {mirrormaker2.GUARANTEE}",
                        mm2_mirror(source, target, tuned=True),
                        mm2_topic,
                    ),
                ],
                [
                    Mirror(
                        "MirrorMaker 2 at least once",
                        f"{mm2} at least once, its defaults (positions flushed every 60 s): {mirrormaker2.GUARANTEE}",
                        mm2_mirror(source, target, offset_flush_ms=None),
                        mm2_topic,
                    ),
                    Mirror(
                        "MirrorMaker 2 exactly once",
                        f"{mm2} exactly-once mode: {mirrormaker2.EXACTLY_ONCE_GUARANTEE}",
                        mm2_mirror(source, target, offset_flush_ms=None, exactly_once=True),
                        mm2_topic,
                    ),
                ],
            ),
            MirrorSide(
                LOGFERRY,
                logferry_source,
                logferry_target,
                clusters[0].broker_pids() + clusters[1].broker_pids(),
                [preserve],
                [
                    preserve,
                    Mirror(
                        "logferry mirror produce",
                        LOGFERRY_PRODUCE_GUARANTEE,
                        logferry_mirror(source_zk, target_zk, "produce"),
                        same_topic,
                    ),
                    Mirror(  # Kafka's transactions as logferry serves them, under a kill -9
                        "MirrorMaker 2 exactly once, logferry to logferry",
                        f"{mm2} exactly-once mode between two logferry clusters: {mirrormaker2.EXACTLY_ONCE_GUARANTEE}",
                        mm2_mirror(logferry_source, logferry_target, offset_flush_ms=None, exactly_once=True),
                        mm2_topic,
                    ),
                ],
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


def target_counts(
    side: MirrorSide, mirror: subprocess.Popen[bytes], target_topic: str, partitions: int, timeout: float, folder: Path
) -> Iterator[tuple[float, int]]:
    """Every POLL seconds, (now, records the target topic holds: its end offsets'
    span), while ``mirror`` runs; CaseFailed when it exits or ``timeout`` passes (every
    wait on a mirror is bounded by this)."""
    watcher = Consumer({"bootstrap.servers": side.target, "group.id": "mirror-watch"})
    try:
        t0, held = time.monotonic(), 0
        while True:
            now = time.monotonic()
            if mirror.poll() is not None:
                raise CaseFailed(
                    f"{side.name} mirror exited ({mirror.returncode}) with {held} copied; {log_tail(folder)}"
                )
            if now - t0 > timeout:
                raise CaseFailed(f"{side.name} mirror: {held} copied after {timeout:.0f} s; {log_tail(folder)}")
            if target_topic in watcher.list_topics(timeout=10).topics:
                with contextlib.suppress(KafkaException):  # a topic just created: leaders not known yet
                    held = ends(watcher, target_topic, partitions)
            yield now, held
            time.sleep(POLL)
    finally:
        watcher.close()


def kill(mirror: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the mirror's whole process group (a JVM's threads, a Python mirror),
    then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(mirror.pid, signal.SIGKILL)
    mirror.wait()


def copy(side: MirrorSide, way: Mirror, topic: str, tag: str, n: int, partitions: int, folder: Path) -> Copy:
    """Start mirror ``way`` of ``side``, time it until the target holds N, read its cost, kill it."""
    target_topic = way.target_topic(topic, tag)
    brokers_before = sum(cpu_seconds(pid) for pid in side.broker_pids)
    t0 = time.monotonic()
    mirror = way.start(topic, tag, folder)
    try:
        first = None
        for now, held in target_counts(side, mirror, target_topic, partitions, START_SLACK + n / MIN_RATE, folder):
            if held and first is None:
                first = now
            if held >= n:
                done = now  # the poll's own time, as ``first``: equal when one poll saw it all
                break
        mirror_cpu, rss = cpu_seconds(mirror.pid), peak_rss_mib(mirror.pid)
        broker_cpu = sum(cpu_seconds(pid) for pid in side.broker_pids) - brokers_before
    finally:
        # Killed, not stopped: nothing of the mirror is measured after, and a clean stop of
        # MM2's Connect worker takes seconds (tests/integration/test_kafka_mirrormaker2.py).
        kill(mirror)
    assert first is not None
    return Copy(first - t0, done - t0, mirror_cpu, broker_cpu, rss)


@dataclass(frozen=True)
class Tally:
    """A copy counted against its source, record by record."""

    held: int
    """Records the target holds."""
    duplicates: int
    """Copies beyond a record's first."""
    gaps: int
    """Source records the target lacks."""
    reordered: int
    """Places where the target's first copies step back in the source's order."""
    foreign: int = 0
    """Target records the source never had (none expected)."""

    def __add__(self, other: Tally) -> Tally:
        return Tally(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def tally(source: list[int], target: list[int]) -> Tally:
    """Count ``target`` (record numbers in offset order) against ``source`` (the same
    partition's, in its order): a copy resumed after a kill that re-sends a tail shows
    as duplicates with reordered 0 (the re-sent records come again in order); a record
    copied ahead of one the source has before it shows as reordered."""
    position = {record: i for i, record in enumerate(source)}
    seen: set[int] = set()
    duplicates = foreign = reordered = 0
    last = -1
    for record in target:
        if record not in position:
            foreign += 1
        elif record in seen:
            duplicates += 1
        else:
            seen.add(record)
            if position[record] < last:
                reordered += 1
            last = position[record]
    return Tally(len(target), duplicates, len(source) - len(seen), reordered, foreign)


@dataclass
class Killed:
    """One mirror killed with -9 mid-copy and started again."""

    at_kill: int
    """Records the target held when the mirror was killed."""
    settled: float
    """Seconds from the restart until the target held N and stopped growing."""
    counts: Tally


def kill_and_resume(
    side: MirrorSide, mirror: Mirror, topic: str, tag: str, n: int, partitions: int, folder: Path
) -> Killed:
    """Start ``mirror``, kill it with -9 once the target holds N/2, start it again with
    the same tag, wait until the target holds at least N and stays put for QUIET
    seconds, then count the copy against the source."""
    target_topic = mirror.target_topic(topic, tag)
    bound = START_SLACK + n / MIN_RATE
    first = mirror.start(topic, tag, folder / "first")
    try:
        for _, held in target_counts(side, first, target_topic, partitions, bound, folder / "first"):
            if held >= n // 2:
                break
    finally:
        kill(first)
    at_kill = held
    t0 = time.monotonic()
    again = mirror.start(topic, tag, folder / "again")
    try:
        last, since = -1, t0
        for now, held in target_counts(side, again, target_topic, partitions, bound + QUIET, folder / "again"):
            if held != last:
                last, since = held, now
            elif held >= n and now - since >= QUIET:
                break
        settled = since - t0
    finally:
        kill(again)
    source = read_back(side.source, topic, n, partitions)
    target = read_back(side.target, target_topic, n, partitions)
    counts = Tally(0, 0, 0, 0)
    for p in range(partitions):
        if source[p] != list(range(p, n, partitions)):
            why = differences(source[p], list(range(p, n, partitions)))
            raise CaseFailed(f"{side.name} source {topic} partition {p} (the fill, not the mirror): {why}")
        counts += tally(source[p], target[p])
    return Killed(at_kill, settled, counts)


def log_tail(folder: Path) -> str:
    """The last lines of the mirror's log, for a failure's message."""
    for log in (folder / "mm2.log", folder / "mirror.log"):
        if log.exists():
            return "its log ends: " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
    return "no log"


SHORT_IDLE = 1.0
"""Seconds without a record after which a read-back that has N is done (a duplicate
would come after the N)."""
LONG_IDLE = 5.0
"""Seconds without a record after which a read-back short of N is done (what it lacks
are gaps, counted or failed by the caller)."""


def read_back(bootstrap: str, topic: str, n: int, partitions: int) -> dict[int, list[int]]:
    """Every record's number in ``topic``, per partition in offset order (untimed): read
    ``read_committed`` (MirrorMaker 2's exactly-once copies are transactions; the
    others have none) from the start until SHORT_IDLE without a record once N arrived,
    or LONG_IDLE before; bounded in time in any case."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirror-verify",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    got: dict[int, list[int]] = {p: [] for p in range(partitions)}
    try:
        consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        total, last_record = 0, time.monotonic()
        give_up = last_record + 60 + n / 20_000
        while (now := time.monotonic()) < give_up:
            batch = consumer.consume(10_000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    raise CaseFailed(f"{topic} on {bootstrap}: reading it back: {msg.error()}")
                got[msg.partition()].append(sequence(msg.value()))
            total += len(batch)
            if batch:
                last_record = now
            elif now - last_record > (SHORT_IDLE if total >= n else LONG_IDLE):
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
            for index, way in enumerate(side.rate):  # each from the same source topic, into its own
                tag = f"{number}{'abcdefgh'[index]}" if index else str(number)
                folder = workdir / f"{side.name.split()[-1]}-{tag}"
                try:
                    outcome = copy(side, way, topic, tag, n, partitions, folder)
                    verify(side, topic, way.target_topic(topic, tag), n, partitions)
                finally:
                    keep_logs(folder, logs)
                results.setdefault(way.name, []).append(outcome)
                say(
                    f"run {number}: {way.name} {n / outcome.to_all:,.0f} msgs/s start to N "
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


def keep_logs(folder: Path, logs: Path | None) -> None:
    """Copy the mirror logs under ``folder`` into ``logs`` (they are deleted with the
    run's folder otherwise), named after their folders."""
    if logs is None:
        return
    logs.mkdir(parents=True, exist_ok=True)
    for log in folder.rglob("*.log"):
        shutil.copy(log, logs / "-".join((*log.relative_to(folder.parent).parent.parts, log.name)))


def run_kill(
    sides: list[MirrorSide], n: int, rounds: int, partitions: int, workdir: Path, logs: Path | None = None
) -> dict[str, list[Killed]]:
    """The kill case: ``rounds`` rounds of every mirror of each side, the first system
    swapped every round."""
    results: dict[str, list[Killed]] = {}
    for number in range(1, rounds + 1):
        for side in sides if number % 2 else sides[::-1]:
            for index, mirror in enumerate(side.kill):
                tag = f"k{number}{'abcdefgh'[index]}"
                topic = f"kill{number}{'abcdefgh'[index]}-mirror"
                fill(side, topic, n, partitions, 60 + n / 10_000)
                folder = workdir / f"{side.name.split()[-1]}-{tag}"
                try:
                    killed = kill_and_resume(side, mirror, topic, tag, n, partitions, folder)
                finally:
                    keep_logs(folder, logs)
                results.setdefault(mirror.name, []).append(killed)
                c = killed.counts
                say(
                    f"kill {number}: {mirror.name} killed with {killed.at_kill:,} of {n:,} copied; target settled "
                    f"{killed.settled:.1f} s after the restart holding {c.held:,}: {c.duplicates:,} duplicates, "
                    f"{c.gaps:,} gaps, {c.reordered:,} reordered, {c.foreign:,} foreign"
                )
    return results


def kill_table(results: dict[str, list[Killed]], n: int, rounds: int) -> list[str]:
    lines = [
        f"kill -9 at N/2 and restart: {n:,} records of {SIZE} B, {rounds} round(s); medians, totals over the rounds",
        "| mirror | copied at the kill | duplicates, median (total) | gaps, total | reordered, total "
        "| restart to settled, s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    med = statistics.median
    for name, runs in results.items():
        total = sum((k.counts for k in runs), Tally(0, 0, 0, 0))
        foreign = f"; {total.foreign:,} foreign" if total.foreign else ""
        lines.append(
            f"| {name} | {med(k.at_kill for k in runs):,.0f} | {med(k.counts.duplicates for k in runs):,.0f} "
            f"({total.duplicates:,}) | {total.gaps:,}{foreign} | {total.reordered:,} "
            f"| {med(k.settled for k in runs):.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="records per copy")
    parser.add_argument("--rounds", "--runs", type=int, default=3, help="rounds; the table shows medians")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the mirrored topic")
    parser.add_argument("--cases", default="rate", help=f"comma-separated subset of {','.join(CASE_NAMES)}")
    parser.add_argument("--logs", type=Path, help="copy the mirrors' logs into this folder")
    args = parser.parse_args(argv)
    if args.messages < 2 or args.rounds < 1 or args.partitions < 1:
        parser.error("--messages must be at least 2, --rounds and --partitions at least 1")
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    if not cases or set(cases) - set(CASE_NAMES):
        parser.error(f"--cases {args.cases!r}: use {','.join(CASE_NAMES)}")
    reason = kafka_unavailable() or mirrormaker2.unavailable_reason()
    if reason is not None:  # a skip, as vs_kafka.py skips: not a failure
        say(reason)
        return 0
    say(
        f"vs_kafka_mirror: {', '.join(cases)}; {args.messages:,} records x {args.rounds} round(s), "
        f"{args.partitions} partitions; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )

    def body() -> None:
        with (
            tempfile.TemporaryDirectory(prefix="logferry-vs-kafka-mirror-") as tmp,
            started_systems(Path(tmp)) as sides,
        ):
            results = killed = None
            if "rate" in cases:
                results = run(sides, args.messages, args.rounds, args.partitions, Path(tmp) / "mirrors", args.logs)
            if "kill" in cases:
                killed = run_kill(sides, args.messages, args.rounds, args.partitions, Path(tmp) / "kills", args.logs)
        say("")
        if results is not None:
            for line in table(results, args.messages, args.rounds):
                say(line)
        if killed is not None:
            for line in kill_table(killed, args.messages, args.rounds):
                say(line)
        for side in sides:
            for mirror in [*side.rate, *(m for m in side.kill if m not in side.rate)]:
                say(f"{mirror.name}: {mirror.guarantee}")
        say(f"load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    return run_main(body, FAILURES, "every broker and mirror is stopped and its data deleted", say)


if __name__ == "__main__":
    sys.exit(main())
