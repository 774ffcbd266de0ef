"""Helpers of the replication tests: a 3-broker setting with short timeouts, an acks=all
load that records what was acknowledged, a group-consumer reader, and the checks that
count (every acknowledged message readable in order, byte-identical replicas)."""

from __future__ import annotations

import contextlib
import functools
import threading
import time

import pytest

from broker.client import Admin, GroupConsumer, PartitionInfo, Producer, SimpleConsumer
from tests.support import waiting

# Short session and lag so failures are noticed in seconds.
REPLICATED = {
    "zk_session_timeout_s": 3.0,
    "replica_lag_time_max_ms": 1500,
    "leader_rebalance_interval_s": 0,
    "acks_all_timeout_ms": 5000,
    "default_replication_factor": 3,
    "min_insync_replicas": 2,
}


wait_until = functools.partial(waiting.wait_until, interval=0.1, ignore=(Exception,))
"""The suite's wait_until, riding out a predicate that fails while a broker is down."""


def describe(cluster, topic: str, avoid=None) -> dict[int, PartitionInfo]:
    """Partition states as the brokers report them (not asking ``avoid``: a paused
    broker would not answer)."""
    addresses = [b.address for b in cluster.brokers if b is not avoid and b.is_running()]
    with Admin(brokers=addresses, request_timeout=5) as admin:
        return admin.describe_partitions(topic)


def broker_by_id(cluster, broker_id: int):
    return next(b for b in cluster.brokers if b.id == broker_id)


class Load:
    """A producer thread sending numbered messages with acks=all, round-robin over
    partitions, recording which messages were acknowledged."""

    def __init__(self, cluster, topic: str, partitions: int, chunk: int = 10):
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.chunk = chunk
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.acked: dict[int, set[bytes]] = {p: set() for p in range(partitions)}
        self.failed: list[Exception] = []
        self.crashed: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.producer = Producer(
            zk=cluster.zk_connect, acks="all", linger_ms=2, delivery_timeout=120, retry_backoff_ms=50
        )

    @property
    def acked_count(self) -> int:
        with self._lock:
            return sum(len(a) for a in self.acked.values())

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by wait_for_acks, not lost in a thread
            self.crashed = exc
            raise

    def _produce(self) -> None:
        futures = []
        i = 0
        while not self._stop.is_set() and i < 2_000_000:
            p = (i // self.chunk) % self.partitions
            values = [b"%d:%09d" % (p, i + j) for j in range(self.chunk)]
            i += self.chunk
            self.sent[p].extend(values)
            future = self.producer.send(self.topic, values, partition=p)
            future.add_callback(self._done_callback(p, values))
            futures.append(future)
            if len(futures) >= 100:  # bound the backlog: wait for the oldest
                with contextlib.suppress(Exception):
                    futures.pop(0).wait(150)
            time.sleep(0.001)

    def _done_callback(self, partition: int, values: list[bytes]):
        def done(future) -> None:
            error = future.exception()
            with self._lock:
                if error is None:
                    self.acked[partition].update(values)
                else:
                    self.failed.append(error)

        return done

    def wait_for_acks(self, more: int, timeout: float, what: str) -> None:
        target = self.acked_count + more

        def acked() -> bool:
            if self.crashed is not None:
                pytest.fail(f"the producing thread died: {self.crashed!r}")
            return self.acked_count >= target

        wait_until(acked, timeout, what)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(150)
        self.producer.close()


def read_partitions(cluster, topic: str, partitions: int) -> dict[int, list[bytes]]:
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        return {p: [m.value for m in consumer.messages(topic, p, follow=True, timeout=2.0)] for p in range(partitions)}


def assert_every_ack_readable_in_order(load: Load, consumed: dict[int, list[bytes]]) -> None:
    for p, values in consumed.items():
        acked = load.acked[p]
        missing = acked - set(values)
        assert not missing, f"partition {p}: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
        first_seen: dict[bytes, int] = {}
        for i, v in enumerate(values):
            first_seen.setdefault(v, i)
        order = [first_seen[v] for v in load.sent[p] if v in acked]
        assert order == sorted(order), f"partition {p}: acknowledged messages out of order"


def replica_bytes(broker, topic: str, partition: int) -> bytes:
    directory = broker.log_dir / f"{topic}-{partition}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def assert_replicas_identical(cluster, topic: str, partitions: int) -> None:
    """Wait until every replica of every partition holds the same bytes."""
    for p in range(partitions):

        def same(p: int = p) -> bool:
            logs = [replica_bytes(b, topic, p) for b in cluster.brokers]
            return len(set(logs)) == 1 and len(logs[0]) > 0

        wait_until(same, 30, f"byte-identical replicas of {topic}-{p}")


def full_isr(cluster, topic: str):
    """A predicate: every running broker reports every replica in sync (each broker is
    asked: one just resumed from SIGSTOP still holds its old view for a moment)."""

    def check() -> bool:
        for broker in cluster.brokers:
            if not broker.is_running():
                return False
            with Admin(brokers=[broker.address], request_timeout=5) as admin:
                parts = admin.describe_partitions(topic)
            if not all(len(i.isr) == len(i.replicas) and i.leader >= 0 for i in parts.values()):
                return False
        return True

    return check


class GroupReader:
    """A consumer-group member reading the topic while brokers die (a dashboard)."""

    def __init__(self, cluster, topic: str):
        self.values: dict[int, list[bytes]] = {}
        self._stop = threading.Event()
        self._consumer = GroupConsumer("dashboard", [topic], zk=cluster.zk_connect, start="earliest")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.poll(timeout=0.5):
                self.values.setdefault(message.partition, []).append(message.value)

    def distinct(self) -> int:
        return sum(len(set(v)) for v in list(self.values.values()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
