"""Apache Kafka's MirrorMaker 2, dedicated mode: its properties and its JVM, in one place.

``org.apache.kafka.connect.mirror.MirrorMaker`` (what ``connect-mirror-maker.sh
mm2.properties`` runs): one JVM holding a Connect worker per replication flow, which
runs MirrorSourceConnector (the copy), MirrorCheckpointConnector and
MirrorHeartbeatConnector. Its jars are a folder of their own
(``apache-kafka-mirrormaker2-<version>``, :mod:`broker.testing.kafka_jars`, resolved by
``scripts/install-jars.sh apache-kafka-mirrormaker2``): Maven Central has no
MirrorMaker for the broker's 4.4.0, and 4.3.1's does not run on the 4.4.0 clients.

Two callers: ``benchmarks/vs_kafka_mirror.py`` (MM2 from one Apache Kafka to another,
timed against logferry's mirror) and tests/integration/test_kafka_mirrormaker2.py (MM2
between two logferry clusters). This module imports nothing from the benchmarks'
``peers`` package, so that the test can import it as ``benchmarks.peers.mirrormaker2``.

What MM2 guarantees as configured here (its default, at-least-once mode): every record
is copied, in order per partition (one task per partition range, a producer with
retries and idempotence), to ``<source alias>.<topic>`` on the target, at offsets of
the target's own (MM2 records the source-to-target mapping in its offset-syncs topic);
the source positions are committed every ``offset.flush.interval.ms`` into Connect's
offsets topic, so a killed MM2 copies again what it had sent since the last commit:
duplicates possible, gaps not. Its exactly-once mode (Connect's
``exactly.once.source.support``: transactions on the target) is what
:func:`properties` sets with ``exactly_once_rest_port``; vs_kafka_mirror.py's kill case
runs both.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from broker.testing import kafka_jars
from broker.testing.jvm import java_executable

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
VERSION = kafka_jars.MIRRORMAKER2_VERSION
HEAP_OPTIONS = ("-Xms256M", "-Xmx2G")
"""What ``connect-mirror-maker.sh`` sets when ``KAFKA_HEAP_OPTS`` is unset."""
GUARANTEE = (
    "at least once (source positions committed every offset.flush.interval.ms; a killed MM2 "
    "copies again from the last commit: duplicates possible, no gaps), order kept per partition, "
    "target offsets its own (mapped in its offset-syncs topic)"
)
EXACTLY_ONCE_GUARANTEE = (
    "exactly once for read_committed readers of the target (exactly.once.source.support: each poll's "
    "records and their source positions committed in one transaction; a killed MM2's open transaction "
    "is aborted when its successor starts), order kept per partition, target offsets its own"
)

TUNED = {
    "tasks.max": "2",
    "{source}.consumer.max.poll.records": "10000",
    "{source}.consumer.max.partition.fetch.bytes": "4194304",
    "{source}.consumer.fetch.min.bytes": "65536",
    "{target}.producer.batch.size": "524288",
    "{target}.producer.linger.ms": "20",
    "{target}.producer.buffer.memory": "134217728",
    "{target}.producer.enable.idempotence": "true",
    "{target}.producer.max.in.flight.requests.per.connection": "5",
}
"""The settings a user raises to make MM2 copy faster (``{source}``/``{target}``: the
cluster aliases): the defaults Connect gives a source task's producer are one request
of at most 16 KiB per partition in flight at a time (``max.in.flight = 1`` keeps the
order without idempotence) and 500 records per poll. Here: an idempotent producer,
which keeps the order with 5 requests in flight, 512 KiB batches after up to 20 ms,
polls of up to 10,000 records and 4 MiB per partition, and one task per partition
of the benchmark's two."""

LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p [%c{{1}}] %m%n
"""


def unavailable_reason() -> str | None:
    """One line saying why MM2 cannot run here and what to run, or None."""
    if java_executable() is None:
        return "MirrorMaker 2 skipped: no java (Java 17+, then scripts/install-jars.sh apache-kafka-mirrormaker2)"
    if not kafka_jars.resolved(kafka_jars.MIRRORMAKER2):
        return kafka_jars.missing_reason(kafka_jars.MIRRORMAKER2)
    return None


def properties(
    source_bootstrap: str,
    target_bootstrap: str,
    topics: str,
    source: str = "src",
    target: str = "dst",
    replication_factor: int = 1,
    offset_flush_ms: int | None = 1000,
    exactly_once_rest_port: int | None = None,
    tuned: bool = False,
) -> str:
    """Dedicated MM2 from cluster ``source`` to cluster ``target`` (aliases: the target
    topic is ``<source>.<topic>``, Connect's state topics are named after them, so new
    aliases start from no state), ``topics`` a regex list. One task; replication factor
    ``replication_factor`` for every topic MM2 creates; no ACL or topic-config sync
    (logferry serves neither DescribeAcls nor every Kafka topic config), no group
    offset sync, checkpoints or heartbeats (not part of the copy); topics looked for
    every 2 s (a topic created after the start is found at once, not in 10 minutes).
    Source positions are committed every ``offset_flush_ms`` (None: Connect's default,
    60 s). ``exactly_once_rest_port``: MM2's exactly-once mode (Kafka >= 3.5, KIP-618 in
    dedicated mode): the target's Connect worker gets ``exactly.once.source.support =
    enabled`` (each poll's records and source positions in one transaction on the
    target), the internal REST server it needs on that port of 127.0.0.1, and the source
    is read ``read_committed``, as Kafka's geo-replication docs say.
    ``tuned``: the copy's consumer and producer get :data:`TUNED` (larger batches and
    polls, an idempotent producer with 5 requests in flight, a task per partition).
    Everything else is MM2's default, its consumer's and producer's included."""
    rf = str(replication_factor)
    lines = {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": source_bootstrap,
        f"{target}.bootstrap.servers": target_bootstrap,
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": topics,
        f"{target}->{source}.enabled": "false",
        "tasks.max": "1",
        "replication.factor": rf,
        "offset-syncs.topic.replication.factor": rf,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "config.storage.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        "sync.topic.acls.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "emit.heartbeats.enabled": "false",
        "refresh.topics.interval.seconds": "2",
        "refresh.groups.interval.seconds": "60",
    }
    if offset_flush_ms is not None:
        lines["offset.flush.interval.ms"] = str(offset_flush_ms)
    if tuned:
        lines.update({key.format(source=source, target=target): value for key, value in TUNED.items()})
    if exactly_once_rest_port is not None:
        lines[f"{target}.exactly.once.source.support"] = "enabled"
        lines[f"{source}.consumer.isolation.level"] = "read_committed"
        lines["dedicated.mode.enable.internal.rest"] = "true"
        lines["listeners"] = f"http://127.0.0.1:{exactly_once_rest_port}"
    return "".join(f"{key} = {value}\n" for key, value in lines.items())


def start(
    workdir: Path,
    config: str,
    target: str,
    jvm_options: Sequence[str],
    log_level: str = "INFO",
) -> subprocess.Popen[bytes]:
    """Write ``config`` (from :func:`properties`) and a log4j2 config into ``workdir``
    and start MM2 for the flows into cluster ``target`` (``--clusters``), its stdout
    and stderr into ``workdir/mm2.log``, in a session of its own (a caller can kill
    the whole JVM with ``os.killpg``)."""
    java = java_executable()
    if java is None:
        raise RuntimeError("MirrorMaker 2: no java")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "mm2.properties").write_text(config)
    (workdir / "log4j2.properties").write_text(LOG4J.format(level=log_level))
    with (workdir / "mm2.log").open("wb") as out:
        return subprocess.Popen(
            [
                str(java),
                *jvm_options,
                f"-Djava.io.tmpdir={workdir}",
                f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
                "-cp",
                kafka_jars.classpath(kafka_jars.MIRRORMAKER2),
                MAIN_CLASS,
                str(workdir / "mm2.properties"),
                "--clusters",
                target,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
