"""Group commit through real broker processes: consumers get data without waiting for
the flush timer, in order, and never see bytes that a crash then takes back."""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Producer, SimpleConsumer

pytestmark = pytest.mark.integration

NO_TIMER = {"flush_ms": 600_000, "flush_messages": 10_000_000}
"""The paper's timer set so far off that only group commit can make data visible."""


def _follow(cluster, topic: str, count: int, seen: list[tuple[int, bytes]], stop: threading.Event) -> None:
    """Follow partition 0 from offset 0, recording (batch offset, value) until stopped.

    The topic must exist first (``cluster.create_topic``): an error ends the following."""
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        offset = 0
        while len(seen) < count and not stop.is_set():
            try:
                result = consumer.fetch(topic, 0, offset, max_wait_ms=200)
            except Exception:  # the broker is down (killed): keep what was seen
                return
            for batch in result.batches:
                seen.extend((batch.offset, value) for value in batch.values)
            offset = result.next_offset


def test_a_following_consumer_gets_every_message_in_order_without_the_timer(broker_cluster):
    cluster = broker_cluster(1, log=NO_TIMER)
    cluster.create_topic("gc")
    count = 20_000
    seen: list[tuple[int, bytes]] = []
    stop = threading.Event()
    consumer = threading.Thread(target=_follow, args=(cluster, "gc", count, seen, stop))
    consumer.start()
    try:
        with Producer(brokers=cluster.bootstrap, linger_ms=0) as producer:
            for i in range(0, count, 100):
                producer.send("gc", [b"gc-%06d" % j for j in range(i, i + 100)], partition=0)
            producer.flush(30)
        consumer.join(60)  # far below flush_ms: the fsyncs that made it visible were not timed
    finally:
        stop.set()
        consumer.join(10)
    assert [value for _, value in seen] == [b"gc-%06d" % j for j in range(count)]


@pytest.mark.slow
def test_what_a_consumer_saw_survives_a_kill_9(broker_cluster):
    """Everything a consumer read before the broker was killed is in the log after the
    restart, at the same offsets: visible bytes were fsynced (crash-safe visibility)."""
    cluster = broker_cluster(1, log=NO_TIMER)
    cluster.create_topic("gc9")
    broker = cluster.brokers[0]
    seen: list[tuple[int, bytes]] = []
    stop = threading.Event()
    consumer = threading.Thread(target=_follow, args=(cluster, "gc9", 10**9, seen, stop))
    consumer.start()
    producing = threading.Event()

    def produce() -> None:
        with Producer(brokers=cluster.bootstrap, linger_ms=0, delivery_timeout=3) as producer:
            i = 0
            while not stop.is_set():
                try:
                    producer.send("gc9", [b"k-%07d" % (i + j) for j in range(50)], partition=0)
                except Exception:
                    return
                i += 50
                if i >= 5_000:
                    producing.set()
                time.sleep(0.001)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert producing.wait(30)
        deadline = time.monotonic() + 30
        while len(seen) < 2_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.kill()
    finally:
        stop.set()
        producer.join(30)
        consumer.join(30)
    assert len(seen) >= 2_000, "the consumer saw too little before the kill"
    broker.start()
    after: list[tuple[int, bytes]] = []
    with SimpleConsumer(brokers=cluster.bootstrap) as reader:
        offset = 0
        while len(after) < len(seen):
            result = reader.fetch("gc9", 0, offset, max_wait_ms=1000)
            if not result.batches:
                break
            for batch in result.batches:
                after.extend((batch.offset, value) for value in batch.values)
            offset = result.next_offset
    assert after[: len(seen)] == seen, "a message a consumer saw was taken back by the crash"
