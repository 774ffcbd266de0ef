"""A rolling restart of every broker of a 3-broker cluster under load: nothing lost.

Each broker in turn is stopped with SIGTERM and started again while an acks=all
producer and a consumer group run. With controlled shutdown the stopping broker's
leadership moves to in-sync replicas first, so the producer never meets a partition
without a leader. Counted: zero acknowledged messages lost, zero produce errors
surfaced to the application; the slowest acknowledgement is printed (with controlled
shutdown off as well, for comparison: docs/replication.md quotes both).
"""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Admin, Producer
from tests.replication.conftest import (
    REPLICATED,
    GroupReader,
    assert_every_ack_readable_in_order,
    full_isr,
    read_partitions,
    wait_until,
)

pytestmark = pytest.mark.integration


class TimedLoad:
    """An acks=all producer sending a batch every 5 ms, round robin over partitions,
    recording what was acknowledged and how long each acknowledgement took."""

    def __init__(self, zk: str, topic: str, partitions: int):
        self.topic = topic
        self.partitions = partitions
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.acked: dict[int, set[bytes]] = {p: set() for p in range(partitions)}
        self.failed: list[BaseException] = []
        self.latencies: list[tuple[float, float]] = []  # (sent at, seconds to the ack)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.producer = Producer(zk=zk, acks="all", linger_ms=1, retry_backoff_ms=20, delivery_timeout=120)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TimedLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            p = i % self.partitions
            values = [b"%d:%09d" % (p, i * 5 + j) for j in range(5)]
            i += 1
            self.sent[p].extend(values)
            started = time.monotonic()
            future = self.producer.send(self.topic, values, partition=p)
            future.add_callback(self._done(p, values, started))
            time.sleep(0.005)

    def _done(self, partition: int, values: list[bytes], started: float):
        def done(future) -> None:
            took = time.monotonic() - started
            error = future.exception()
            with self._lock:
                if error is None:
                    self.acked[partition].update(values)
                    self.latencies.append((started, took))
                else:
                    self.failed.append(error)

        return done

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(a) for a in self.acked.values())

    def slowest(self, since: float, until: float) -> float:
        with self._lock:
            return max((took for at, took in self.latencies if since <= at <= until), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(150)
        self.producer.close()


@pytest.mark.slow
@pytest.mark.parametrize("controlled", [True, False], ids=["controlled", "uncontrolled"])
def test_rolling_restart_loses_nothing_and_surfaces_no_error(broker_cluster, controlled):
    cluster = broker_cluster(3, broker={**REPLICATED, "controlled_shutdown": controlled})
    topic = "rolling"
    partitions = 3
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, partitions, replication_factor=3, min_insync_replicas=2)
    wait_until(full_isr(cluster, topic), 30, "every replica in sync")
    load = TimedLoad(cluster.zk_connect, topic, partitions).start()
    reader = GroupReader(cluster, topic)
    stops: list[tuple[int, float]] = []
    try:
        wait_until(lambda: load.acked_count() > 1000, 60, "acks before the roll")
        quiet_from = time.monotonic()
        time.sleep(2)
        print(
            f"before the roll: slowest acknowledgement over 2 s "
            f"{load.slowest(quiet_from, time.monotonic()) * 1000:.0f} ms"
        )
        for broker in cluster.brokers:
            retries = load.producer.metrics().get("retries", 0)
            began = time.monotonic()
            broker.stop()
            stopped = time.monotonic()
            time.sleep(1)  # the two left take the load alone for a moment
            restarted = time.monotonic()
            broker.start()
            wait_until(full_isr(cluster, topic), 60, f"broker {broker.id} back in every ISR")
            # acknowledgements of batches sent meanwhile, read once they settled
            settled = time.monotonic()
            before = load.acked_count()
            wait_until(lambda before=before: load.acked_count() > before + 200, 60, "acks after the restart")
            retried = load.producer.metrics().get("retries", 0) - retries
            stop_phase = load.slowest(began - 0.2, restarted)
            start_phase = load.slowest(restarted, settled)
            stops.append((broker.id, max(stop_phase, start_phase)))
            print(
                f"broker {broker.id}: SIGTERM to exit {stopped - began:.2f}s; slowest "
                f"acks=all acknowledgement around its stop {stop_phase * 1000:.0f} ms, "
                f"around its restart {start_phase * 1000:.0f} ms; {retried} produce "
                "requests retried by the producer"
            )
    finally:
        load.stop()
    slowest = max(s for _, s in stops)
    mode = "controlled shutdown" if controlled else "controlled shutdown off"
    print(
        f"rolling restart of 3 brokers ({mode}): {load.acked_count()} messages "
        f"acknowledged, slowest acknowledgement during the roll {slowest * 1000:.0f} ms "
        f"(per broker: {', '.join(f'{b}: {s * 1000:.0f} ms' for b, s in stops)})"
    )
    assert not load.failed, f"produce errors surfaced to the application: {load.failed[:3]}"
    consumed = read_partitions(cluster, topic, partitions)
    assert_every_ack_readable_in_order(load, consumed)  # type: ignore[arg-type]
    acked = set().union(*load.acked.values())
    try:
        wait_until(
            lambda: acked <= set().union(*map(set, list(reader.values.values()) or [[]])),
            60,
            "the group read every acknowledged message",
        )
    finally:
        reader.close()
    for broker in cluster.brokers:
        print(
            "\n".join(
                line for line in broker.log_text().splitlines() if "controlled shutdown" in line or "stop:" in line
            )
        )
    if controlled:
        for broker in cluster.brokers:
            assert "controlled shutdown: leadership moved" in broker.log_text()
