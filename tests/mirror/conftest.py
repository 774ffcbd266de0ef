"""Fixtures and checks for the mirror tests: two real clusters, mirror processes, comparisons.

A *source* and a *target* cluster each get their own ZooKeeper chroot and broker
processes. Mirrors run as ``python -m broker mirror --config FILE`` subprocesses (so
tests can SIGTERM or kill -9 them); each writes a status file the tests read.
Comparisons work on stored batch bytes: a batch copied byte for byte has the same
messages, in the same order, under the same codec.

``two_clusters`` starts a source and a target for one test; ``module_two_clusters`` is
a source and a target shared by a module's tests that leave both brokers running, each
test with topics and a mirror group of its own (``unique_name``).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.common.config import dumps
from broker.testing import prefork
from broker.wire import records
from tests.support.brokers import Cluster, kept_running, shared_cluster
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperHarness

ROOT = Path(__file__).resolve().parents[2]


wait_for = functools.partial(wait_until, interval=0.25)
"""The suite's wait_until at the pace of the mirror processes' status files."""


class MirrorProcess:
    """One mirror subprocess with its config, log and status file."""

    def __init__(self, workdir: Path, name: str, config: dict):
        self.name = name
        self.workdir = workdir
        self.status_file = workdir / f"{name}.status.json"
        config = {k: dict(v) for k, v in config.items()}
        config.setdefault("metrics", {})["status_file"] = str(self.status_file)
        self.config_file = workdir / f"{name}.toml"
        self.config_file.write_text(dumps(config))
        self.log_file = workdir / f"{name}.log"
        self.proc: prefork.ChildProcess | None = None

    def start(self) -> MirrorProcess:
        with self.log_file.open("ab") as log:  # from the worker's fork server (broker.testing.prefork)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = prefork.start_module("broker", ["mirror", "--config", str(self.config_file)], log, env, ROOT)
        return self

    def status(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 80) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@pytest.fixture
def two_clusters(broker_cluster, zookeeper):
    """Factory: ``two_clusters(source_broker={...}, source_log={...}) -> (source, target)``."""

    def make(source_broker: dict | None = None, source_log: dict | None = None):
        source = broker_cluster(1, broker=source_broker, log=source_log, zk=zookeeper.new_chroot())
        target = broker_cluster(1, zk=zookeeper.new_chroot())
        return source, target

    return make


@pytest.fixture(scope="module")
def _module_source_and_target(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperHarness, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, Cluster]]:
    with (
        shared_cluster(request, zookeeper, tmp_path_factory, "module_two_clusters", "module-source") as source,
        shared_cluster(request, zookeeper, tmp_path_factory, "module_two_clusters", "module-target") as target,
    ):
        yield source, target


@pytest.fixture
def module_two_clusters(_module_source_and_target: tuple[Cluster, Cluster]) -> Iterator[tuple[Cluster, Cluster]]:
    """``(source, target)``, what ``two_clusters()`` starts, shared by the module's tests:
    name topics and the mirror's group with ``unique_name``, and a mirror's pattern too,
    so that it matches none of the other tests' topics."""
    with kept_running(*_module_source_and_target):
        yield _module_source_and_target


@pytest.fixture
def mirrors(tmp_path: Path, request) -> Iterator[Callable[..., MirrorProcess]]:
    """Factory: ``mirrors(name, source, target, metrics={...}, **mirror_keys) -> MirrorProcess``
    (started); ``metrics`` is the ``[metrics]`` table (the status file is added)."""
    started: list[MirrorProcess] = []

    def start(
        name: str, source, target, start: bool = True, metrics: dict | None = None, **mirror_keys
    ) -> MirrorProcess:
        # The tests written for the re-producing mirror say so; test_mirror_preserve.py
        # passes mode="preserve" (the config's default).
        mirror = {
            "group": "mirror",
            "commit_interval_ms": 300,
            "session_timeout_s": 4.0,
            "shutdown_timeout_s": 20.0,
            "mode": "produce",
            **mirror_keys,
        }
        if "topics" not in mirror and "pattern" not in mirror:
            mirror["pattern"] = ".*"
        config = {
            "source": {"zk_connect": source.zk_connect},
            "target": {"zk_connect": target.zk_connect},
            "mirror": mirror,
            "metrics": dict(metrics or {}),
        }
        process = MirrorProcess(tmp_path, name, config)
        started.append(process)
        return process.start() if start else process

    yield start
    failed = getattr(request.node, "rep_call", None)
    for process in started:
        if failed is not None and failed.failed:
            print(f"--- mirror {process.name} ---\n{process.log_tail()}")
        if process.alive():
            process.kill()


def produce(
    zk: str,
    topic: str,
    count: int,
    partitions: int = 4,
    *,
    tag: str = "",
    compression: str = "none",
    batch: int = 500,
    size: int = 100,
) -> None:
    """Send ``count`` unique values (``<topic>/<tag>/<i>`` padded to ``size``) in batches."""
    pad = b"." * size
    with Producer(zk=zk, linger_ms=5, compression=compression, batch_messages=batch) as producer:
        prefix = f"{topic}/{tag}/".encode()
        futures = []
        for start in range(0, count, batch):
            values = [
                (prefix + b"%d" % i + pad)[:size] if size > len(prefix) + 12 else prefix + b"%d" % i
                for i in range(start, min(start + batch, count))
            ]
            futures.append(producer.send(topic, values, partition=(start // batch) % partitions))
        producer.flush(60)
        for future in futures:
            future.wait(60)


def create(zk: str, topic: str, partitions: int) -> None:
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, partitions=partitions)


EMPTY_FETCHES = 20
"""How many answers without a batch, below the end it was told, :func:`read_batches`
takes before it fails (each after 50 ms): it must never return a partial log as whole."""


def read_batches(zk: str, topic: str) -> dict[int, list[bytes]]:
    """Every stored batch of every partition of ``topic``, as bytes, in log order, up to
    each partition's visible end when the read began."""
    out: dict[int, list[bytes]] = {}
    with SimpleConsumer(zk=zk, max_bytes=4 * 1024 * 1024) as consumer:
        for p in consumer.partitions(topic):
            end = consumer.offsets(topic, p).end
            offset = consumer.offsets(topic, p).start
            got: list[bytes] = []
            empty = 0
            while offset < end:
                result = consumer.fetch(topic, p, offset, keep_raw=True)
                got.extend(bytes(b.raw) for b in result.batches)
                if result.next_offset > offset:
                    offset, empty = result.next_offset, 0
                    continue
                empty += 1  # nothing below the end: a passing state, or a fault to name
                assert empty < EMPTY_FETCHES, f"{topic}-{p}: {empty} fetches at {offset} (end {end}) returned nothing"
                time.sleep(0.05)
            out[p] = got
    return out


def ends(zk: str, topic: str) -> dict[int, int]:
    """Visible end of each partition (empty if the topic does not exist)."""
    with SimpleConsumer(zk=zk) as consumer:
        try:
            return {p: consumer.offsets(topic, p).end for p in consumer.partitions(topic)}
        except Exception:
            return {}


def message_count(batches: dict[int, list[bytes]]) -> int:
    return sum(records.BATCH_HEADER.unpack_from(b)[4] for bs in batches.values() for b in bs)


def dedupe(batches: list[bytes]) -> list[bytes]:
    """First occurrence of each batch, in order (a repeated tail collapses)."""
    seen: set[bytes] = set()
    out = []
    for b in batches:
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out


def mirrored(source_zk: str, target_zk: str, topic: str, exact: bool) -> bool:
    """True once the target holds every source batch of ``topic`` in the same partition/order.

    ``exact``: no duplicates allowed either. Otherwise duplicates are tolerated (they
    can only come from the uncommitted tail after a crash) but order and content not.
    """
    src_ends, tgt_ends = ends(source_zk, topic), ends(target_zk, topic)
    if not tgt_ends or any(tgt_ends.get(p, -1) < e for p, e in src_ends.items()):
        return False
    source, target = read_batches(source_zk, topic), read_batches(target_zk, topic)
    for p, batches in source.items():
        got = target.get(p, [])
        if exact and got != batches:
            return False
        if not exact and dedupe(got) != batches:
            return False
    return True


def assert_mirrored(source_zk: str, target_zk: str, topic: str, exact: bool) -> None:
    """Like :func:`mirrored` but explains the difference."""
    source, target = read_batches(source_zk, topic), read_batches(target_zk, topic)
    for p, batches in source.items():
        got = target.get(p, [])
        if not exact:
            got = dedupe(got)
        assert len(got) == len(batches), f"{topic}-{p}: {len(got)} batches on the target, {len(batches)} on the source"
        assert got == batches, f"{topic}-{p}: batch contents or order differ"


def topic_messages(zk: str, topic: str) -> int:
    """Messages ``topic`` holds now, from each partition's log start (0 while the topic
    does not exist yet)."""
    from broker.client import SimpleConsumer, UnknownTopicOrPartitionError

    with SimpleConsumer(zk=zk) as consumer:
        try:
            partitions = consumer.partitions(topic)
        except UnknownTopicOrPartitionError:
            return 0
        total = 0
        for p in partitions:
            pos, end = consumer.offsets(topic, p)
            while pos < end:
                result = consumer.fetch(topic, p, pos, max_bytes=16 << 20)
                total += sum(len(b.values) for b in result.batches)
                if result.next_offset == pos:
                    break
                pos = result.next_offset
        return total


def values_by_partition(zk: str, topic: str) -> dict[int, list[bytes]]:
    """Every message value of ``topic``, per partition, in log order (decoded)."""
    from broker.client import messages_of

    out: dict[int, list[bytes]] = {}
    with SimpleConsumer(zk=zk, max_bytes=4 << 20) as consumer:
        for p in consumer.partitions(topic):
            offset, end = consumer.offsets(topic, p)
            values: list[bytes] = []
            while offset < end:
                result = consumer.fetch(topic, p, offset)
                for batch in result.batches:
                    values.extend(m.value for m in messages_of(topic, p, batch))
                if result.next_offset == offset:
                    break
                offset = result.next_offset
            out[p] = values
    return out
