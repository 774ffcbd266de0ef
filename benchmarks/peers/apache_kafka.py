"""Apache Kafka, the system the paper describes: a KRaft single node next to logferry.

Jars: Apache Kafka 4.4.0 from Maven Central, resolved by ``apache-kafka/pom.xml`` next to
this module into ``benchmarks/.cache/apache-kafka-4.4.0/`` (git-ignored; another folder
with ``LOGFERRY_BENCH_CACHE``) by ``scripts/install-kafka-jars.sh`` (which
``scripts/install-bench-deps.sh`` runs; :mod:`broker.testing.kafka_jars` says where). The classpath is
every jar of that folder; nothing is downloaded while a benchmark runs. The module is
not called ``kafka.py`` so that it can never shadow kafka-python's ``kafka`` package.

The node: one JVM with ``process.roles=broker,controller`` (KRaft: 4.x has no ZooKeeper
mode), node id 1 and a controller quorum of itself (``controller.quorum.voters``), a
PLAINTEXT and a CONTROLLER listener on 127.0.0.1 free ports, ``log.dirs`` in a private
folder formatted by ``kafka.tools.StorageTool`` with a fresh cluster id. Internal topics
have replication factor 1 (a single node cannot hold Kafka's default 3) and
``group.initial.rebalance.delay.ms=0``, as in Kafka's own single-node sample config.
Everything else is Kafka's default, in particular:

- durability: ``log.flush.interval.messages`` and ``log.flush.interval.ms`` unset, so
  no fsync per message nor on a timer; a produce is acknowledged (acks=1 and acks=all
  alike with one replica) and visible to consumers once it is in the page cache. The OS
  writes it out; Kafka fsyncs at segment roll and clean shutdown only. Replication is
  Kafka's durability, and a single node has none;
- JVM: what ``kafka-server-start.sh`` and ``kafka-run-class.sh`` pass: a 1 GiB heap
  (``-Xms1g -Xmx1g``, Kafka's own default, which leaves the rest of the machine's
  24 GiB to the page cache, where Kafka keeps its data) and G1 with
  ``MaxGCPauseMillis=20``, ``InitiatingHeapOccupancyPercent=35``,
  ``ExplicitGCInvokesConcurrent``; the JVM sees the machine's 2 cores;
- threads: ``num.network.threads=3``, ``num.io.threads=8``.

Stopping: SIGTERM to the JVM's process group (Kafka's controlled shutdown), SIGKILL
after a grace period (:class:`peers.base.Server`); the caller deletes the data folder.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from peers.base import LOOPBACK, PeerUnavailable, Server, disk_bytes, free_port, port_open, wait_until

from broker.testing.jvm import java_executable, java_major
from broker.testing.kafka_jars import KAFKA_VERSION, RESOLVED, jar_dir

HERE = Path(__file__).resolve().parent
LOG4J = HERE / "apache-kafka" / "log4j2.properties"

HEAP = "1g"
JVM_OPTIONS = (
    f"-Xms{HEAP}",
    f"-Xmx{HEAP}",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
MIN_JAVA = 17
START_TIMEOUT = 60.0
FORMAT_TIMEOUT = 60.0
STOP_GRACE = 30.0
READY_LINE = "Kafka Server started"
INSTALL_HINT = "run scripts/install-kafka-jars.sh (Java 17+ and Maven, then the jars from Maven Central)"


def unavailable_reason() -> str | None:
    """One line saying why Apache Kafka cannot run here and what to run, or None."""
    java = java_executable()
    if java is None:
        return f"Apache Kafka skipped: no java; {INSTALL_HINT}"
    major = java_major(java)
    if major is None or major < MIN_JAVA:
        return f"Apache Kafka skipped: {java} is Java {major or '?'}, Kafka 4 needs {MIN_JAVA}+; {INSTALL_HINT}"
    if not (jar_dir() / RESOLVED).exists():
        return f"Apache Kafka skipped: its {KAFKA_VERSION} jars are not in {jar_dir()}; {INSTALL_HINT}"
    return None


def cluster_id() -> str:
    """A fresh KRaft cluster id: 16 random bytes, URL-safe base64 without padding (the
    form ``kafka-storage.sh random-uuid`` prints). It may start with "-": pass it as
    ``--cluster-id=<id>``, never as a separate argument."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def server_properties(port: int, controller_port: int, log_dir: Path) -> str:
    """The node's server.properties: see the module docstring for each choice."""
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


class ApacheKafka:
    """A private Apache Kafka KRaft node (broker and controller in one JVM)."""

    name = "Apache Kafka"

    def __init__(self) -> None:
        self.server: Server | None = None
        self.port = 0
        self.data: Path | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the PLAINTEXT listener, for Kafka clients."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        """Process id of the JVM (the broker process)."""
        if self.server is None:
            raise PeerUnavailable("Apache Kafka is not started")
        return self.server.pid

    def ensure_installed(self) -> None:
        """Raise :class:`PeerUnavailable` with one line saying what to run when Java or
        the jars are missing (they are installed ahead of time, never during a run)."""
        reason = unavailable_reason()
        if reason is not None:
            raise PeerUnavailable(reason)

    def _java(self, workdir: Path) -> list[str]:
        java = java_executable()
        if java is None:
            raise PeerUnavailable(f"Apache Kafka: no java; {INSTALL_HINT}")
        return [
            str(java),
            *JVM_OPTIONS,
            f"-Djava.io.tmpdir={workdir / 'tmp'}",  # where snappy and zstd unpack their native code
            f"-Dkafka.logs.dir={workdir}",
            f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp",
            str(jar_dir() / "*"),
        ]

    def start(self, workdir: Path) -> None:
        """Format a data folder under ``workdir``, start the node on free loopback ports
        and wait until it says it started and its listener accepts connections."""
        self.ensure_installed()
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        self.data = workdir / "data"
        self.port, controller_port = free_port(), free_port()
        while controller_port == self.port:
            controller_port = free_port()
        config = workdir / "server.properties"
        config.write_text(server_properties(self.port, controller_port, self.data))
        java = self._java(workdir)
        try:
            formatted = subprocess.run(
                [*java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id()}", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=FORMAT_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(
                f"Apache Kafka: formatting {self.data} took more than {FORMAT_TIMEOUT:.0f} s"
            ) from None
        if formatted.returncode != 0:
            tail = "\n".join((formatted.stdout + formatted.stderr).strip().splitlines()[-10:])
            raise PeerUnavailable(f"Apache Kafka: formatting {self.data} failed:\n{tail}")
        # log4j2 appends to server.log, and so do the JVM's stdout and stderr (both
        # opened for appending): one file, whose tail explains a failed start.
        log = workdir / "server.log"
        self.server = Server("apache-kafka", [*java, "kafka.Kafka", str(config)], log, cwd=workdir)
        wait_until(
            lambda: READY_LINE in log.read_text(errors="replace") and port_open(self.port),
            START_TIMEOUT,
            "Apache Kafka",
            self.server,
        )

    def storage_bytes(self) -> int:
        """Bytes allocated under the node's data folder."""
        if self.data is None:
            raise PeerUnavailable("Apache Kafka is not started")
        return disk_bytes(self.data)

    def stop(self) -> None:
        """SIGTERM the JVM (a controlled shutdown), SIGKILL after a grace period. Safe
        to call twice or after a failed start."""
        if self.server is not None:
            self.server.stop(grace=STOP_GRACE)
            self.server = None
