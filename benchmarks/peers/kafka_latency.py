"""Both sides of the end-to-end latency measurement (:mod:`benchmarks.e2e`) over Kafka's
protocol with librdkafka (confluent-kafka): the same client against Apache Kafka and
against logferry's Kafka listener, so that only the broker differs.

Settings, each side's documented low-latency ones with persistence on:

- producer: ``linger.ms=1``, as the OpenMessaging Benchmark's Kafka driver sets it for
  latency (driver-kafka/kafka-latency.yaml)
  (librdkafka's default is 5 ms; with 0, and a million requests allowed in flight,
  every message can be a request of its own: at 10,000 msgs/s on the busy 2-core
  machine both brokers fell seconds behind in a first try with 0), ``acks``
  as asked, ``socket.nagle.disable`` (TCP_NODELAY: librdkafka leaves Nagle's
  algorithm on by default, Kafka's Java client and logferry's client turn it off), one
  ``produce()`` per message, ``poll(0)`` after each to serve delivery reports; every
  message must be acknowledged without error;
- consumer: ``assign()`` of partition 0 from its start (no group: a join would be
  part of nobody's latency), Kafka's default ``fetch.min.bytes=1`` (a waiting fetch is
  answered as soon as one message is there) and ``fetch.wait.max.ms=500``, and
  ``fetch.queue.backoff.ms=0`` so that librdkafka fetches again at once.

The consumer side creates the topic (one partition, one replica) through CreateTopics
unless it exists: a topic that needs settings a Kafka client cannot give (logferry's
``visibility``, docs/kafka.md "Configs") is created by the caller beforehand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peers.base import CaseFailed

LEADER_TIMEOUT = 30.0


@dataclass(frozen=True)
class KafkaLatency:
    """A picklable :class:`benchmarks.e2e.LatencyClient` for any Kafka bootstrap."""

    bootstrap: str
    acks: str = "1"
    linger_ms: float = 1.0

    def create(self, topic: str) -> None:
        """The topic, one partition and one replica, through CreateTopics; one that
        exists already is left as it is."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30, request_timeout=30)
        try:
            futures[topic].result(timeout=60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CaseFailed(f"{self.bootstrap}: creating {topic}: {exc}") from None

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        self.create(dest)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "vs-kafka-latency",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.queue.backoff.ms": 0,
            }
        )
        try:
            wait_for_leader(consumer, dest)
            consumer.assign([TopicPartition(dest, 0, -2)])
            give_up = time.monotonic() + timeout
            seen, fetching = 0, False
            while seen < count and time.monotonic() < give_up:
                # poll(), one message a call: consume(n, timeout) would wait for n
                # messages or the timeout, which is latency.
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                error = msg.error()
                if error is None:
                    on_value(msg.value())
                    seen += 1
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise CaseFailed(f"{self.bootstrap} {dest}: {error}")
                elif not fetching:
                    # The first end of the partition: its offset is resolved and a
                    # fetch answered. Ready only now, else the producer's first
                    # seconds would wait on the consumer's start-up (its offset
                    # lookup retries on a 500 ms timer while a new topic spreads).
                    fetching = True
                    ready()
        finally:
            consumer.close()

    def produce(self, dest: str, messages: Any, timeout: float) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": self.acks,
                "linger.ms": self.linger_ms,
                "socket.nagle.disable": True,
            }
        )
        acked, failed = [0], [0]

        def delivered(error: Any, _msg: Any) -> None:
            if error is None:
                acked[0] += 1
            else:
                failed[0] += 1

        try:
            wait_for_leader(producer, dest)
            send, poll = producer.produce, producer.poll
            for message in messages:
                send(dest, message.value, partition=0, on_delivery=delivered)
                poll(0)
            left = producer.flush(timeout)
        finally:
            producer.purge()  # what is still queued after a failure: close() would wait for it
            producer.close()
        if left or failed[0] or acked[0] != messages.count:
            raise CaseFailed(
                f"{self.bootstrap} {dest}: {acked[0]:,} of {messages.count:,} messages acknowledged, "
                f"{failed[0]:,} failed, {left:,} unanswered"
            )


def wait_for_leader(client: Any, topic: str, timeout: float = LEADER_TIMEOUT) -> None:
    """Until a librdkafka client's metadata names partition 0's leader (a new topic
    spreads to the brokers a moment after CreateTopics answers); CaseFailed after
    ``timeout`` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        meta = client.list_topics(topic, timeout=10).topics.get(topic)
        partition = None if meta is None or meta.error is not None else meta.partitions.get(0)
        if partition is not None and partition.leader >= 0:
            return
        if time.monotonic() > give_up:
            raise CaseFailed(f"{topic}: no leader after {timeout:.0f} s")
        time.sleep(0.05)
