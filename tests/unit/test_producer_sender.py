"""The producer's sender and retry policy against a fake cluster (no sockets, no threads)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.client.accumulator import Accumulator, ProducerBatch
from broker.client.sender import RetryPolicy, Sender, plan_requests
from broker.common.errors import (
    BrokerNotAvailableError, CorruptBatchError, NotLeaderError, UnknownTopicOrPartitionError,
)
from broker.wire import protocol, records

TP = ("t", 0)


class FakeConnection:
    address = ("h", 1)

    def __init__(self) -> None:
        self.requests: list = []

    def request(self, api, fields, payload, expect_response=True, callback=None):
        future = SimpleNamespace(error=None, frame=None, done=lambda: False)
        self.requests.append((api, fields, list(payload), future, callback))
        return future if expect_response else None


class FakeCluster:
    def __init__(self) -> None:
        self.conn = FakeConnection()
        self.forgotten: list[str] = []

    def leader_address(self, topic: str, partition: int) -> tuple[str, int]:
        return ("h", 1)

    def connection(self, address):
        return self.conn

    def forget(self, topic: str) -> None:
        self.forgotten.append(topic)


def answer(request, parts=None, err=0, error=None) -> None:
    """Play the broker: call the request's callback with a response (or an error)."""
    _, _, _, future, callback = request
    future.error = error
    future.frame = SimpleNamespace(header={"err": err, "parts": parts or []})
    callback(future)


def setup(acks: int = 1, retries: int | None = None):
    now = [10.0]
    acc = Accumulator(linger=0.0, batch_bytes=1 << 20, batch_messages=100, buffer_bytes=1 << 20,
                      block_timeout=0.0, max_request_bytes=1 << 20, clock=lambda: now[0])
    cluster = FakeCluster()
    unknown: list[str] = []
    sender = Sender(acc, cluster, acks=acks, codec=records.CODEC_NONE, request_timeout=30.0,
                    max_request_bytes=1 << 20,
                    retry=RetryPolicy(retries, 0.1, 120.0, rng=lambda: 0.0),
                    on_unknown_topic=unknown.append, clock=lambda: now[0])
    return acc, cluster, sender, now, unknown


def test_a_batch_is_encoded_sent_and_acknowledged() -> None:
    acc, cluster, sender, now, _ = setup()
    future = acc.append(TP, [b"a", b"b"], 2, None, 5)
    sender.send(acc.ready(now[0])[0])
    [request] = cluster.conn.requests
    api, fields, payload, _, _ = request
    assert api == protocol.PRODUCE and fields["acks"] == 1
    assert fields["parts"] == [["t", 0, len(payload[0])]]
    [batch], _ = records.decode_batches(payload[0], 0)
    assert batch.values == [b"a", b"b"]
    answer(request, [["t", 0, 0, 4096, None]])
    assert future.wait(0) == 4096 and acc.unfinished == 0
    stats = sender.metrics()
    assert stats["messages_acked"] == 2 and stats["requests"] == 1 and stats["batches_sent"] == 1


def test_acks_0_completes_without_an_answer() -> None:
    acc, cluster, sender, now, _ = setup(acks=0)
    future = acc.append(TP, [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    assert future.wait(0) is None and sender.metrics()["messages_acked"] == 0


def test_a_retriable_error_backs_off_and_retries_the_same_bytes() -> None:
    acc, cluster, sender, now, _ = setup()
    future = acc.append(TP, [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    first = cluster.conn.requests[0]
    answer(first, [["t", 0, NotLeaderError.code, None, "moved"]])
    assert not future.done() and cluster.forgotten == ["t"]
    assert acc.ready(now[0])[0] == {}  # backing off 0.1 s
    now[0] += 0.1
    sender.send(acc.ready(now[0])[0])
    second = cluster.conn.requests[1]
    assert second[2] == first[2]  # encoded once
    answer(second, [["t", 0, 0, 0, None]])
    assert future.wait(0) == 0 and sender.metrics()["retries"] == 1


def test_a_fatal_error_fails_the_partitions_later_batches_too() -> None:
    acc, cluster, sender, now, _ = setup()
    first = acc.append(TP, [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    later = acc.append(TP, [b"b"], 1, None, 5)
    answer(cluster.conn.requests[0], [["t", 0, CorruptBatchError.code, None, "bad crc"]])
    for future in (first, later):
        with pytest.raises(CorruptBatchError):
            future.wait(0)
    assert acc.unfinished == 0 and sender.metrics()["batches_failed"] == 2


def test_retries_are_bounded_and_a_missing_result_is_retriable() -> None:
    acc, cluster, sender, now, _ = setup(retries=1)
    future = acc.append(TP, [b"a"], 1, None, 5)
    for _ in range(2):
        sender.send(acc.ready(now[0])[0])
        answer(cluster.conn.requests[-1], [])  # no result for t-0
        now[0] += 1.0
    with pytest.raises(BrokerNotAvailableError, match="no result"):
        future.wait(0)


def test_an_unknown_topic_makes_the_producer_ask_for_its_partitions_again() -> None:
    acc, cluster, sender, now, unknown = setup()
    acc.append(TP, [b"a"], 1, None, 5)
    sender.send(acc.ready(now[0])[0])
    answer(cluster.conn.requests[0], [["t", 0, UnknownTopicOrPartitionError.code, None, ""]])
    assert unknown == ["t"]


def test_retry_policy() -> None:
    policy = RetryPolicy(3, 0.1, 10.0, max_backoff=0.3)
    longest = RetryPolicy(3, 0.1, 10.0, max_backoff=0.3, rng=lambda: 0.0)
    shortest = RetryPolicy(3, 0.1, 10.0, max_backoff=0.3, rng=lambda: 1.0)
    retriable = NotLeaderError("x")
    assert policy.should_retry(retriable, 3, 1.0, closing=False)
    assert not policy.should_retry(retriable, 4, 1.0, closing=False)  # out of tries
    assert not policy.should_retry(retriable, 1, 11.0, closing=False)  # delivery timeout
    assert not policy.should_retry(retriable, 1, 1.0, closing=True)
    assert not policy.should_retry(CorruptBatchError("x"), 1, 1.0, closing=False)
    # jitter in the upper half of each delay: [ceiling / 2, ceiling]
    assert (shortest.delay(1), longest.delay(1)) == pytest.approx((0.05, 0.1))
    assert (shortest.delay(2), longest.delay(2)) == pytest.approx((0.1, 0.2))
    assert (shortest.delay(9), longest.delay(9)) == pytest.approx((0.15, 0.3))  # capped


def test_plan_requests_splits_by_size_and_keeps_partitions_whole() -> None:
    a, b, c = ([ProducerBatch(0)] for _ in range(3))
    plan = plan_requests([(("t", 0), a, 6), (("t", 1), b, 5), (("t", 2), c, 20)], 10)
    assert plan == [[(("t", 0), a)], [(("t", 1), b)], [(("t", 2), c)]]
    assert plan_requests([(("t", 0), a, 4), (("t", 1), b, 6)], 10) == [[(("t", 0), a), (("t", 1), b)]]


def test_one_message_batches_go_in_one_request_and_each_future_gets_its_own_offset() -> None:
    from broker.client.accumulator import fast_send

    acc, cluster, sender, now, _ = setup()
    acc.batch_messages = 1  # as a Producer(batch_messages=1) builds it
    send = fast_send(acc, lambda topic: 0, lambda *args: None, clock=lambda: 1_700_000_000.0,
                     encode_single=records.encode_single, partition_counts={"t": 1})
    futures = [send("t", b"x" * n) for n in (1, 20, 300)]
    sender.send(acc.ready(now[0])[0])
    [request] = cluster.conn.requests
    _, fields, payload, _, _ = request
    assert len(payload) == 3 and fields["parts"] == [["t", 0, sum(map(len, payload))]]
    answer(request, [["t", 0, 0, 1000, None]])
    starts = [1000, 1000 + len(payload[0]), 1000 + len(payload[0]) + len(payload[1])]
    assert [f.wait(0) for f in futures] == starts and acc.unfinished == 0
    stats = sender.metrics()
    assert stats["messages_acked"] == 3 and stats["batches_sent"] == 3 and stats["requests"] == 1
