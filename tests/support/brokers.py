"""Real broker processes for integration tests: start, stop, kill -9, restart.

Each broker runs as ``python -m broker broker --config <toml>`` on a free port of
127.0.0.1 with its own log dir, registered in the test's ZooKeeper chroot. The
``broker_cluster`` fixture starts as many as a test asks for and always stops them;
a failed test prints each broker's log tail. ``kafka_cluster`` is the same with a Kafka
listener on every broker (docs/kafka.md), seen through :class:`KafkaCluster`.

``module_cluster`` is one broker shared by the tests of a module, for tests that only
create, produce to and consume their own topics and groups (named with ``unique_name``):
each broker start costs about half a second of CPU, and most tests need nothing else.
A test that stops, kills, pauses or reconfigures a broker, or asserts on what a whole
broker holds (its topics, its metrics, its log), keeps its own ``broker_cluster``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from broker.client import Admin, SimpleConsumer
from broker.testing import prefork
from broker.testing.localrun import BrokerProcess as _BrokerProcess
from tests.support import register_log_source, unregister_log_source
from tests.support.zookeeper import ZooKeeperHarness

TEST_BROKER_SETTINGS = {"datacenter": "test", "num_partitions": 4, "zk_session_timeout_s": 6.0}
TEST_LOG_SETTINGS = {"flush_messages": 10000, "flush_ms": 20}
KAFKA_LISTENER = {"listen": "127.0.0.1:0"}
"""The ``[kafka]`` table of a test broker with a Kafka listener (on a free port)."""


class BrokerProcess(_BrokerProcess):
    """A broker process with the test suite's defaults (4 partitions, 20 ms flushes)."""

    def __init__(
        self,
        broker_id: int,
        zk_connect: str,
        workdir: Path,
        broker: dict[str, Any] | None = None,
        log: dict[str, Any] | None = None,
        tls: dict[str, Any] | None = None,
        kafka: dict[str, Any] | None = None,
        **where: Any,
    ):
        """``where``: ``host``, ``port`` and ``netns`` of :class:`broker.testing.localrun.BrokerProcess`."""
        super().__init__(
            broker_id,
            zk_connect,
            workdir,
            broker={**TEST_BROKER_SETTINGS, **(broker or {})},
            log={**TEST_LOG_SETTINGS, **(log or {})},
            tls=tls,
            kafka=kafka,
            **where,
        )


class Cluster:
    """Brokers of one test cluster sharing a ZooKeeper chroot."""

    def __init__(self, zk_connect: str, workdir: Path):
        self.zk_connect = zk_connect
        self.workdir = workdir
        self.brokers: list[BrokerProcess] = []

    def add(
        self,
        broker: dict[str, Any] | None = None,
        log: dict[str, Any] | None = None,
        start: bool = True,
        tls: dict[str, Any] | None = None,
        kafka: dict[str, Any] | None = None,
    ) -> BrokerProcess:
        process = BrokerProcess(len(self.brokers) + 1, self.zk_connect, self.workdir, broker, log, tls, kafka)
        self.brokers.append(process)
        if start:
            process.start()
        return process

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers]

    def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        config: dict[str, Any] | None = None,
        timeout: float = 20.0,
        replication_factor: int = 0,
    ) -> None:
        """Create ``topic`` and return once its partition 0 has a leader (a consumer that
        follows it from the start would otherwise stop at its first error)."""
        with Admin(brokers=self.bootstrap) as admin:
            admin.create_topic(topic, partitions=partitions, config=config, replication_factor=replication_factor)
        with SimpleConsumer(brokers=self.bootstrap) as consumer:
            deadline = time.monotonic() + timeout
            while True:  # the leader is elected just after the topic is created
                try:
                    consumer.offsets(topic, 0)
                    return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def stop_all(self) -> None:
        for broker in self.brokers:
            try:
                broker.stop()
            except Exception:
                broker.kill()

    def logs(self) -> str:
        return "\n".join(f"--- broker {b.id} ({b.log_file}) ---\n{b.log_tail(60)}" for b in self.brokers)


@pytest.fixture(scope="session", autouse=True)
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[prefork.ForkServer]:
    """This worker's fork server: brokers start from it (:mod:`broker.testing.prefork`),
    about 0.3 s of CPU fewer each; it starts with the first broker.
    ``LOGFERRY_TEST_PREFORK=0``: exec every broker instead."""
    server = prefork.ForkServer(tmp_path_factory.mktemp("prefork"))
    if os.environ.get("LOGFERRY_TEST_PREFORK", "1") == "0":
        yield server
        return
    prefork.install(server)
    try:
        yield server
    finally:
        prefork.install(None)
        server.stop()


@pytest.fixture
def broker_cluster(zk_connect: str, tmp_path: Path, request) -> Iterator:
    """Factory: ``broker_cluster(n=1, broker={...}, log={...}, tls={...}) -> Cluster``; all
    stopped after. ``tls`` is each broker's ``[tls]`` table."""
    clusters: list[Cluster] = []

    def start(
        n: int = 1,
        broker: dict[str, Any] | None = None,
        log: dict[str, Any] | None = None,
        zk: str | None = None,
        tls: dict[str, Any] | None = None,
        kafka: dict[str, Any] | None = None,
    ) -> Cluster:
        cluster = Cluster(zk or zk_connect, tmp_path / f"cluster-{len(clusters)}")
        cluster.workdir.mkdir(parents=True, exist_ok=True)
        clusters.append(cluster)
        for _ in range(n):
            cluster.add(broker, log, tls=tls, kafka=kafka)
        return cluster

    yield start
    failed = getattr(request.node, "rep_call", None)
    for cluster in clusters:
        if failed is not None and failed.failed:
            print(cluster.logs())
        cluster.stop_all()


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The keywords of :meth:`Cluster.add` (``broker``, ``log``, ``tls``, ``kafka``) the
    module's shared broker starts with: none by default. A module that needs other
    settings for all its tests overrides this fixture (module scope)."""
    return {}


@contextmanager
def shared_cluster(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperHarness,
    tmp_path_factory: pytest.TempPathFactory,
    fixture: str,
    name: str = "module-cluster",
    **options: Any,
) -> Iterator[Cluster]:
    """One broker (``options``: :meth:`Cluster.add`'s keywords) in a ZooKeeper chroot of
    its own, for the tests of a module: stopped on leaving, failed or not. Its log is
    shown under a failed test that used ``fixture``, the per-test fixture handing it out
    (which wraps each test in :func:`kept_running`)."""
    zookeeper.ensure_running()
    cluster = Cluster(zookeeper.new_chroot(), tmp_path_factory.mktemp(name))
    key = f"shared-{cluster.workdir.name}"
    try:
        broker = cluster.add(**options)
        title = f"shared {broker.name} log {broker.log_file} (every test of the module)"
        register_log_source(request.config, key, broker, fixture=fixture, title=title)
        yield cluster
    finally:
        unregister_log_source(request.config, key)
        cluster.stop_all()


@contextmanager
def kept_running(*clusters: Cluster) -> Iterator[None]:
    """Around one test on shared clusters: fail it (in its teardown) if it leaves a broker
    down, and start again a broker an earlier test left down (that test was failed)."""
    for cluster in clusters:
        for broker in cluster.brokers:
            if not broker.is_running():
                broker.start()
    yield
    down = [c for c in clusters if not all(b.is_running() for b in c.brokers)]
    if down:
        pytest.fail(
            "a shared broker is down after this test (shared brokers are for tests that "
            "leave them running):\n" + "\n".join(c.logs() for c in down),
            pytrace=False,
        )


@pytest.fixture(scope="module")
def _module_brokers(
    zookeeper: ZooKeeperHarness,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    module_cluster_options: dict[str, Any],
) -> Iterator[Cluster]:
    """The module's one broker; stopped when the module's last test is done (on a
    pytest-xdist worker: when that worker moves on to another module)."""
    with shared_cluster(request, zookeeper, tmp_path_factory, "module_cluster", **module_cluster_options) as cluster:
        yield cluster


@pytest.fixture
def module_cluster(_module_brokers: Cluster) -> Iterator[Cluster]:
    """The :class:`Cluster` of one broker shared by this module's tests (see the module
    docstring); name topics and groups with ``unique_name``. A test that leaves the
    broker down gets an error in its teardown; the next test gets a broker again."""
    with kept_running(_module_brokers):
        yield _module_brokers


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders") -> "orders-1a2b3c4d"``: ``base`` with a suffix of this
    test alone (a hash of its node id, so the same on every run), for the topics and
    groups of a test on a shared broker (``module_cluster``)."""
    suffix = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]

    def name(base: str) -> str:
        return f"{base}-{suffix}"

    return name


class KafkaCluster:
    """A :class:`Cluster` whose brokers also listen for Kafka clients: ``bootstrap`` is
    the Kafka clients' ``bootstrap.servers``, ``native`` the native clients' list."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    @property
    def brokers(self) -> list[BrokerProcess]:
        return self.cluster.brokers

    @property
    def zk_connect(self) -> str:
        return self.cluster.zk_connect

    @property
    def bootstrap(self) -> str:
        return ",".join(b.kafka_address() for b in self.cluster.brokers)

    @property
    def native(self) -> list[str]:
        return self.cluster.bootstrap

    def create_topic(self, topic: str, partitions: int = 1, rf: int = 1) -> None:
        """Create ``topic`` (natively) and return once it has a leader."""
        self.cluster.create_topic(topic, partitions, replication_factor=rf)


@pytest.fixture
def module_kafka_cluster(module_cluster: Cluster) -> KafkaCluster:
    """The module's shared broker (``module_cluster``) as a :class:`KafkaCluster`. Its
    module gives it a Kafka listener: ``module_cluster_options`` returning
    ``{"kafka": KAFKA_LISTENER}``."""
    return KafkaCluster(module_cluster)


@pytest.fixture
def kafka_cluster(broker_cluster) -> Any:
    """Factory: ``kafka_cluster(n=1, **broker_settings) -> KafkaCluster``, brokers with a
    Kafka listener on a free port; all stopped after (by ``broker_cluster``)."""

    def start(n: int = 1, **broker: Any) -> KafkaCluster:
        return KafkaCluster(broker_cluster(n, broker=broker, kafka=KAFKA_LISTENER))

    return start
