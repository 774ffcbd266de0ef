"""Apache Kafka, the system the paper describes: a KRaft single node (or a cluster of
combined nodes) next to logferry.

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

A cluster (``ApacheKafka(nodes=3)``): as many such JVMs, each broker and controller,
node ids 1..N, every node a voter of the static quorum (``controller.quorum.voters``
lists all N), all formatted with one cluster id and started at once; internal topics
then keep Kafka's default replication factor of 3 (min ISR 2). Each node has its own
folder, ports and 1 GiB heap: N GiB of heap in all.

Stopping: SIGTERM to the JVM's process group (Kafka's controlled shutdown), SIGKILL
after a grace period (:class:`peers.base.Server`); the caller deletes the data folder.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
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


def server_properties(
    port: int, controller_port: int, log_dir: Path, node_id: int = 1, voters: str | None = None, nodes: int = 1
) -> str:
    """One node's server.properties: see the module docstring for each choice.
    ``voters``: the quorum's ``id@host:port`` list (default: this node alone);
    ``nodes``: how many brokers the cluster has (internal topics' replicas)."""
    internal_rf = str(min(nodes, 3))
    min_isr = str(min(nodes, 2))
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": internal_rf,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": internal_rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def distinct_ports(count: int) -> list[int]:
    """``count`` free loopback ports, no two alike."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class ApacheKafka:
    """A private Apache Kafka in KRaft mode: ``nodes`` JVMs, each broker and controller
    (one by default)."""

    name = "Apache Kafka"

    def __init__(self, nodes: int = 1) -> None:
        if nodes < 1:
            raise ValueError(f"Apache Kafka needs at least 1 node, not {nodes}")
        self.nodes = nodes
        self.servers: list[Server] = []
        self.ports: list[int] = []
        self.data_dirs: list[Path] = []

    @property
    def server(self) -> Server | None:
        """The first node's process (the only one of a single node)."""
        return self.servers[0] if self.servers else None

    @property
    def port(self) -> int:
        """The first node's PLAINTEXT port (0 before the start)."""
        return self.ports[0] if self.ports else 0

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every node's PLAINTEXT listener, for Kafka clients."""
        return ",".join(f"{LOOPBACK}:{port}" for port in self.ports)

    @property
    def pid(self) -> int:
        """Process id of the first node's JVM (the broker process of a single node)."""
        return self.pids[0]

    @property
    def pids(self) -> list[int]:
        """Process ids of every node's JVM, node 1 first."""
        if not self.servers:
            raise PeerUnavailable("Apache Kafka is not started")
        return [server.pid for server in self.servers]

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

    def _node_dir(self, workdir: Path, node_id: int) -> Path:
        """A single node lives in ``workdir`` itself; node N of a cluster in ``node-N``."""
        return workdir if self.nodes == 1 else workdir / f"node-{node_id}"

    def start(self, workdir: Path) -> None:
        """Format each node's data folder under ``workdir`` with one cluster id, start
        every node on free loopback ports and wait until each says it started and its
        listener accepts connections."""
        self.ensure_installed()
        ports = distinct_ports(2 * self.nodes)
        self.ports, controller_ports = ports[: self.nodes], ports[self.nodes :]
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(controller_ports))
        cluster = cluster_id()
        configs: list[tuple[Path, Path]] = []
        for i in range(self.nodes):
            node_dir = self._node_dir(workdir, i + 1)
            (node_dir / "tmp").mkdir(parents=True, exist_ok=True)
            data = node_dir / "data"
            self.data_dirs.append(data)
            config = node_dir / "server.properties"
            config.write_text(
                server_properties(
                    self.ports[i], controller_ports[i], data, i + 1, voters if self.nodes > 1 else None, self.nodes
                )
            )
            self._format(node_dir, config, data, cluster)
            configs.append((node_dir, config))
        for node_dir, config in configs:
            # log4j2 appends to server.log, and so do the JVM's stdout and stderr (both
            # opened for appending): one file, whose tail explains a failed start.
            log = node_dir / "server.log"
            self.servers.append(
                Server("apache-kafka", [*self._java(node_dir), "kafka.Kafka", str(config)], log, cwd=node_dir)
            )
        for server, port in zip(self.servers, self.ports, strict=True):
            wait_until(
                lambda log=server.log_path, port=port: (
                    READY_LINE in log.read_text(errors="replace") and port_open(port)
                ),
                START_TIMEOUT,
                "Apache Kafka",
                server,
            )

    def _format(self, node_dir: Path, config: Path, data: Path, cluster: str) -> None:
        """``kafka.tools.StorageTool format`` of one node's data folder."""
        try:
            formatted = subprocess.run(
                [
                    *self._java(node_dir),
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster}",
                    "--config",
                    str(config),
                ],
                capture_output=True,
                text=True,
                timeout=FORMAT_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"Apache Kafka: formatting {data} took more than {FORMAT_TIMEOUT:.0f} s") from None
        if formatted.returncode != 0:
            tail = "\n".join((formatted.stdout + formatted.stderr).strip().splitlines()[-10:])
            raise PeerUnavailable(f"Apache Kafka: formatting {data} failed:\n{tail}")

    def storage_bytes(self) -> int:
        """Bytes allocated under every node's data folder."""
        if not self.data_dirs:
            raise PeerUnavailable("Apache Kafka is not started")
        return sum(disk_bytes(data) for data in self.data_dirs)

    def stop(self) -> None:
        """SIGTERM every JVM (a controlled shutdown), SIGKILL after a grace period. Safe
        to call twice or after a failed start. Every node is told at once: one by one,
        the last ones would wait out the grace period for a quorum already gone."""
        for server in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
        while self.servers:
            self.servers.pop().stop(grace=STOP_GRACE)
