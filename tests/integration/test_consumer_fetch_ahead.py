"""SimpleConsumer.messages() sends the next fetch while the caller iterates the current
one: every message still arrives once and in order, a limit stops it, a fetch sent
ahead that failed is made again the ordinary way, and a broker restart in the middle
of the iteration loses and repeats nothing.

The tests that only read their own topic share the module's broker (``module_cluster``,
started as every broker here: each message flushed, so each batch is visible at once)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.client.connection import ResponseFuture
from broker.common.errors import BrokerNotAvailableError

pytestmark = pytest.mark.integration

BATCHES = 200
PER_BATCH = 50
FLUSH_EACH_MESSAGE = {"flush_messages": 1}


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    return {"log": FLUSH_EACH_MESSAGE}


def _produce(zk: str, topic: str) -> list[bytes]:
    sent = [b"%04d-%02d" % (i, j) + b"x" * 100 for i in range(BATCHES) for j in range(PER_BATCH)]
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, 1)
    with Producer(zk=zk, acks=1) as producer:
        for i in range(BATCHES):  # one batch each: waited for before the next
            producer.send(topic, sent[i * PER_BATCH : (i + 1) * PER_BATCH], partition=0).wait(30)
    return sent


def test_many_fetches_deliver_every_message_once_in_order(module_cluster, unique_name):
    cluster = module_cluster
    ahead = unique_name("ahead")
    sent = _produce(cluster.zk_connect, ahead)
    # about 8 KiB per fetch: some 100 fetches, each answered while the previous is read
    with SimpleConsumer(zk=cluster.zk_connect, max_bytes=8192) as consumer:
        got = [m.value for m in consumer.messages(ahead, 0, "earliest")]
        assert got == sent
        assert [m.value for m in consumer.messages(ahead, 0, "earliest", limit=777)] == sent[:777]


def test_a_failed_fetch_ahead_is_made_again(module_cluster, unique_name):
    cluster = module_cluster
    topic = unique_name("ahead-failed")
    sent = _produce(cluster.zk_connect, topic)
    lost = ResponseFuture()
    lost._finish(None, BrokerNotAvailableError("connection to 127.0.0.1:1 was lost"))
    with SimpleConsumer(zk=cluster.zk_connect, max_bytes=8192) as consumer:
        result = consumer._fetched_ahead(lost, topic, 0, 0)
    got = [value for batch in result.batches for value in batch.values]
    assert got and got == sent[: len(got)]


def test_a_restart_while_reading_loses_and_repeats_nothing(broker_cluster):
    cluster = broker_cluster(1, log=FLUSH_EACH_MESSAGE)
    sent = _produce(cluster.zk_connect, "ahead-restart")
    got: list[bytes] = []
    with SimpleConsumer(zk=cluster.zk_connect, max_bytes=8192) as consumer:
        for message in consumer.messages("ahead-restart", 0, "earliest"):
            got.append(message.value)
            if len(got) == 1000:  # a fetch is in flight now: restart under it
                assert cluster.brokers[0].stop() == 0, cluster.logs()
                cluster.brokers[0].start()
    assert got == sent


def test_a_following_iterator_long_polls_on_its_own_connection_read_by_its_thread(module_cluster, unique_name):
    import threading
    import time

    cluster = module_cluster
    topic = unique_name("ahead-follow")
    sent = _produce(cluster.zk_connect, topic)
    with SimpleConsumer(zk=cluster.zk_connect, max_bytes=8192, max_wait_ms=200) as consumer:
        consumer.offsets(topic, 0)  # the pooled connection (and its reader)
        readers = sum(t.name.startswith("logferry-reader") for t in threading.enumerate())
        follow = consumer.messages(topic, 0, "earliest", follow=True, timeout=1.0)
        got = [next(follow).value for _ in range(len(sent))]
        assert got == sent
        with Producer(zk=cluster.zk_connect, acks=1, linger_ms=0) as producer:
            producer.send(topic, b"late", partition=0).wait(30)
        assert next(follow).value == b"late"  # a long poll's answer, read by this thread
        assert (
            sum(t.name.startswith("logferry-reader") for t in threading.enumerate()) == readers
        )  # no reader for its own
        own = follow.gi_frame.f_locals["poll"].conn  # type: ignore[union-attr]
        assert own is not None and not own.closed
        follow.close()
        assert own.closed  # closed with the iteration
        started = time.monotonic()
        assert list(consumer.messages(topic, 0, "latest", follow=True, timeout=0.3)) == []  # still ends after timeout
        assert time.monotonic() - started < 10
