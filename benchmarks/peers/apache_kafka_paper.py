"""Apache Kafka in the paper experiment (paper_experiment.py): the KRaft single node of
:mod:`peers.apache_kafka` driven by librdkafka (confluent-kafka), the most used Kafka
client from Python, through the paper's cases.

Case semantics (see docs/benchmarks.md), each with librdkafka's documented settings:
- batch 1, no ack: ``Producer(acks=0, linger.ms=0, batch.num.messages=1)``: one
  message per batch, nothing acknowledged, ``socket.nagle.disable`` (TCP_NODELAY, off
  in librdkafka by default; Kafka's Java client always sets it). With acks=0 the broker answers nothing, and
  a second connection's acknowledged message could overtake the first's, so the clock
  stops when the partition's end offset (ListOffsets, polled every 2 ms after
  ``flush()`` wrote everything out) reaches the count: the broker holds every message;
- 50 per ack: ``Producer(acks=1, batch.num.messages=50, linger.ms=1000)``; 50
  ``produce()`` calls fill one batch, ``flush()`` sends it at once (flush ignores the
  linger) and returns when its acknowledgement arrived: one batch, one acknowledgement,
  the producer blocked meanwhile, like logferry's ``send(list_of_50).wait()``;
- consume: ``assign()`` from the partition's start, ``consume(1000)`` per call, every
  message handed to Python and counted;
- storage: bytes allocated under the partition's folder (``<topic>-0``: the segment
  and its sparse indexes, by st_blocks);
- end-to-end latency: :class:`peers.kafka_latency.KafkaLatency` (linger 1 ms, acks=1);
  Kafka exposes a message once written, before any fsync.

Topics have one partition and one replica and are created (untimed) by CreateTopics
before a producer case, and deleted by ``drop``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from peers.apache_kafka import ApacheKafka
from peers.base import CaseFailed, Deadline, PeerUnavailable, Stopwatch, System, disk_bytes
from peers.kafka_latency import KafkaLatency, wait_for_leader

END_POLL_S = 0.002
"""How often the batch-1 case asks for the partition's end offset once all is sent."""
CHECK_EVERY = 4096


class ApacheKafkaPaper(System):
    """A KRaft single node of Apache Kafka, driven by librdkafka."""

    name = "Apache Kafka"

    def __init__(self) -> None:
        self.kafka = ApacheKafka()

    def ensure_installed(self) -> None:
        """Java 17+, Apache Kafka's jars (installed ahead of time) and confluent-kafka."""
        self.kafka.ensure_installed()
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise PeerUnavailable(
                "confluent-kafka is missing: install the bench extra (pip install -e .[bench])"
            ) from None

    def start(self, workdir: Path) -> None:
        """The KRaft node in ``workdir`` (see :mod:`peers.apache_kafka`)."""
        self.kafka.start(workdir)

    def stop(self) -> None:
        """A controlled shutdown of the node (SIGKILL after the grace period)."""
        self.kafka.stop()

    # --- cases -------------------------------------------------------------------------

    def _create(self, topic: str) -> None:
        KafkaLatency(self.kafka.bootstrap).create(topic)

    def produce_batch1(self, dest: str, payload: bytes, count: int, clock: Stopwatch, deadline: Deadline) -> None:
        """One message per batch, acks=0; done when the partition's end reaches ``count``."""
        from confluent_kafka import Consumer, Producer, TopicPartition

        self._create(dest)
        producer = Producer(
            {
                "bootstrap.servers": self.kafka.bootstrap,
                "acks": 0,
                "linger.ms": 0,
                "batch.num.messages": 1,
                "queue.buffering.max.messages": 1_000_000,
                "socket.nagle.disable": True,  # as the STOMP peer's socket: a request a message
            }
        )
        watcher = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "paper-end"})
        partition = TopicPartition(dest, 0)
        try:
            wait_for_leader(producer, dest, deadline.remaining())
            wait_for_leader(watcher, dest, deadline.remaining())
            send, poll = producer.produce, producer.poll
            clock.start()
            for i in range(count):
                while True:
                    try:
                        send(dest, payload, partition=0)
                        break
                    except BufferError:
                        poll(0.005)
                if i % CHECK_EVERY == 0:
                    deadline.check()
            if producer.flush(deadline.remaining()):
                raise CaseFailed(f"Apache Kafka {dest}: messages still queued after {deadline.seconds:.0f} s")
            end = 0
            while end < count:
                end = watcher.get_watermark_offsets(partition, timeout=10, cached=False)[1]
                if end < count:
                    deadline.check()
                    time.sleep(END_POLL_S)
            clock.stop()
        finally:
            producer.purge()  # what is still queued after a failure: close() would wait for it
            producer.close()
            watcher.close()
        if end != count:
            raise CaseFailed(f"Apache Kafka {dest}: sent {count}, the partition ends at offset {end}")

    def produce_per_ack(
        self, dest: str, payload: bytes, count: int, per_ack: int, clock: Stopwatch, deadline: Deadline
    ) -> None:
        """Groups of ``per_ack`` in one batch, each acknowledged before the next."""
        from confluent_kafka import Producer

        self._create(dest)
        producer = Producer(
            {
                "bootstrap.servers": self.kafka.bootstrap,
                "acks": 1,
                "linger.ms": 1000,
                "batch.num.messages": per_ack,
            }
        )
        failed: list[Any] = []

        def delivered(error: Any, _msg: Any) -> None:
            if error is not None:
                failed.append(error)

        try:
            wait_for_leader(producer, dest, deadline.remaining())
            send = producer.produce
            sent = 0
            clock.start()
            while sent < count:
                group = min(per_ack, count - sent)
                for _ in range(group):
                    send(dest, payload, partition=0, on_delivery=delivered)
                if producer.flush(deadline.remaining()) or failed:
                    raise CaseFailed(f"Apache Kafka {dest}: a group of {group} was not acknowledged ({failed[:1]})")
                sent += group
                if sent % (CHECK_EVERY * per_ack) == 0:
                    deadline.check()
            clock.stop()
        finally:
            producer.purge()  # what is still queued after a failure: close() would wait for it
            producer.close()

    def consume(self, dest: str, count: int, clock: Stopwatch, deadline: Deadline) -> int:
        """From the partition's start until ``count`` messages, every one counted."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.kafka.bootstrap,
                "group.id": "paper-consume",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10,
            }
        )
        got = 0
        try:
            wait_for_leader(consumer, dest, deadline.remaining())
            clock.start()
            consumer.assign([TopicPartition(dest, 0, -2)])
            while got < count:
                for msg in consumer.consume(1000, 0.5):
                    if msg.error() is None:
                        got += 1
                deadline.check()
            clock.stop()
        finally:
            consumer.close()
        return got

    def storage_bytes(self, dest: str) -> int:
        """Bytes allocated under the partition's folder (0 before the topic exists)."""
        if self.kafka.server is None:
            raise PeerUnavailable("Apache Kafka is not started")
        folder = self.kafka.data_dirs[0] / f"{dest}-0"
        return disk_bytes(folder) if folder.exists() else 0

    def drop(self, dest: str) -> None:
        """Delete the topic (untimed housekeeping; a failure is not the case's)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        for future in admin.delete_topics([dest], operation_timeout=30).values():
            with contextlib.suppress(Exception):  # a topic left behind goes with the data folder
                future.result(timeout=60)

    def latency_client(self) -> KafkaLatency:
        """librdkafka, linger 1 ms, acks=1, against the node."""
        return KafkaLatency(self.kafka.bootstrap)
