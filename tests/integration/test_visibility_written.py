"""``visibility = "written"`` through real broker processes: consumers read appended
bytes without any fsync, and nothing they read is lost when the broker is killed with
SIGKILL (the page cache outlives the process; only a power loss could take it back)."""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Admin, Producer, SimpleConsumer

pytestmark = pytest.mark.integration

NO_FSYNC = {"group_commit": False, "flush_ms": 600_000, "flush_messages": 10_000_000}
"""No group commit and the paper's timer far off: nothing is fsynced during a test."""


def _read(cluster, topic: str, want: int, seconds: float) -> list[tuple[int, bytes]]:
    """(batch offset, value) from offset 0 until ``want`` are read or time is up."""
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + seconds
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        offset = 0
        while len(out) < want and time.monotonic() < deadline:
            result = consumer.fetch(topic, 0, offset, max_wait_ms=200)
            for batch in result.batches:
                out.extend((batch.offset, value) for value in batch.values)
            offset = result.next_offset
    return out


def test_consumers_read_unflushed_bytes_and_keep_them_across_a_kill_9(broker_cluster):
    cluster = broker_cluster(1, log={**NO_FSYNC, "visibility": "written"})
    cluster.create_topic("vw")
    count = 5_000
    seen: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def follow() -> None:
        with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
            offset = 0
            while len(seen) < count and not stop.is_set():
                result = consumer.fetch("vw", 0, offset, max_wait_ms=200)
                for batch in result.batches:
                    seen.extend((batch.offset, value) for value in batch.values)
                offset = result.next_offset

    consumer = threading.Thread(target=follow)
    consumer.start()
    try:
        with Producer(brokers=cluster.bootstrap, linger_ms=0, acks=1) as producer:
            for i in range(0, count, 50):
                producer.send("vw", [b"vw-%06d" % j for j in range(i, i + 50)], partition=0)
            producer.flush(30)
        consumer.join(30)  # no fsync ran: only "written" visibility can show them
    finally:
        stop.set()
        consumer.join(10)
    assert [value for _, value in seen] == [b"vw-%06d" % j for j in range(count)]

    cluster.brokers[0].kill()
    cluster.brokers[0].start()
    after = _read(cluster, "vw", count, 30)
    assert after == seen, "a message a consumer saw was lost when the broker was killed"


def test_a_topic_setting_chooses_visibility_per_topic(broker_cluster):
    cluster = broker_cluster(1, log=NO_FSYNC)  # the broker's own rule: "flushed"
    cluster.create_topic("fast", config={"visibility": "written"})
    cluster.create_topic("safe")
    with Producer(brokers=cluster.bootstrap, linger_ms=0, acks=1) as producer:
        for topic in ("fast", "safe"):
            producer.send(topic, [b"%s-%d" % (topic.encode(), i) for i in range(10)], partition=0).wait(10)
    assert [v for _, v in _read(cluster, "fast", 10, 10)] == [b"fast-%d" % i for i in range(10)]
    assert _read(cluster, "safe", 10, 1.5) == []  # appended and acknowledged, not fsynced
    with Admin(brokers=cluster.bootstrap) as admin:  # switched while running: visible now
        admin.alter_topic("safe", {"visibility": "written"}, [])
    assert [v for _, v in _read(cluster, "safe", 10, 10)] == [b"safe-%d" % i for i in range(10)]
