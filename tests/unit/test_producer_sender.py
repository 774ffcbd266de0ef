"""The producer's sender and retry policy against a fake cluster (no sockets, no threads)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.client.accumulator import Accumulator, ProducerBatch
from broker.client.sender import RetryPolicy, Sender, plan_requests
from broker.common.errors import (
    BrokerNotAvailableError,
    CorruptBatchError,
    NotLeaderError,
    UnknownTopicOrPartitionError,
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
    acc = Accumulator(
        linger=0.0,
        batch_bytes=1 << 20,
        batch_messages=100,
        buffer_bytes=1 << 20,
        block_timeout=0.0,
        max_request_bytes=1 << 20,
        clock=lambda: now[0],
    )
    cluster = FakeCluster()
    unknown: list[str] = []
    sender = Sender(
        acc,
        cluster,
        acks=acks,
        codec=records.CODEC_NONE,
        request_timeout=30.0,
        max_request_bytes=1 << 20,
        retry=RetryPolicy(retries, 0.1, 120.0, rng=lambda: 0.0),
        on_unknown_topic=unknown.append,
        clock=lambda: now[0],
    )
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
    send = fast_send(
        acc,
        lambda topic: 0,
        lambda *args: None,
        clock=lambda: 1_700_000_000.0,
        encode_single=records.encode_single,
        partition_counts={"t": 1},
    )
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


# -- direct sends (linger 0: the appending thread writes when the sender is idle) -------


class OpenCluster(FakeCluster):
    """A FakeCluster whose leaders are cached and connected (or not)."""

    def __init__(self, connected: bool = True) -> None:
        super().__init__()
        self.connected = connected

    def open_connection(self, topic: str, partition: int):
        return self.conn if self.connected else None


def direct_setup(connected: bool = True):
    acc, _, sender, now, _ = setup()
    cluster = sender.cluster = OpenCluster(connected)
    acc.direct = sender.send_direct
    return acc, cluster, sender, now


def idle_sender(acc: Accumulator):
    """A sender thread waiting in next_ready, as between messages; returns the thread
    and what it drained (it returns once the accumulator is closed)."""
    import threading
    import time

    drained: list = []
    thread = threading.Thread(target=lambda: drained.append(acc.next_ready(max_wait=30)))
    thread.start()
    for _ in range(1000):
        with acc.lock:
            if acc._sender_waiting:
                return thread, drained
        time.sleep(0.001)
    raise AssertionError("the sender never waited")


def test_an_idle_producer_sends_from_the_appending_thread_and_keeps_one_request_in_flight() -> None:
    acc, cluster, sender, now = direct_setup()
    thread, drained = idle_sender(acc)
    first = acc.append(TP, [b"a"], 1, None, 5)
    [request] = cluster.conn.requests  # written before append returned: no hand-off
    [batch], _ = records.decode_batches(request[2][0], 0)
    assert batch.values == [b"a"]
    second = acc.append(TP, [b"b"], 1, None, 5)  # a request is in flight: the sender's
    assert len(cluster.conn.requests) == 1
    answer(request, [["t", 0, 0, 100, None]])
    assert first.wait(0) == 100 and not second.done()
    thread.join(10)
    assert not thread.is_alive() and list(drained[0]) == [TP]  # the sender took "b"
    assert [b.values for b in drained[0][TP]] == [[b"b"]]
    acc.close()


def test_no_direct_send_with_linger_or_without_a_direct_sender() -> None:
    for linger, direct in ((0.01, True), (0.0, False)):
        now = [10.0]
        acc = Accumulator(
            linger=linger,
            batch_bytes=1 << 20,
            batch_messages=100,
            buffer_bytes=1 << 20,
            block_timeout=0.0,
            max_request_bytes=1 << 20,
            clock=lambda now=now: now[0],
        )
        sent: list = []
        if direct:
            acc.direct = sent.append
        thread, drained = idle_sender(acc)
        acc.append(TP, [b"a"], 1, None, 5)
        assert sent == []
        if linger:
            now[0] += 1
        thread.join(10)
        assert list(drained[0]) == [TP]  # the sender thread took it, as before
        acc.close()


def test_a_direct_send_that_needs_the_network_is_given_back_to_the_sender() -> None:
    acc, cluster, sender, now = direct_setup(connected=False)
    thread, drained = idle_sender(acc)
    future = acc.append(TP, [b"a"], 1, None, 5)
    assert cluster.conn.requests == []  # no connect or metadata in send()
    thread.join(10)  # woken by give_back: the batch is back in its queue, in order
    assert [b.values for b in drained[0][TP]] == [[b"a"]] and not future.done()
    acc.close()


def test_the_producer_sends_directly_only_with_linger_0_acks_and_no_idempotence() -> None:
    from broker.client import Producer

    cases = [
        ({"linger_ms": 0}, True),
        ({"linger_ms": 0, "acks": 0}, False),
        ({"linger_ms": 0, "acks": "all"}, False),
        ({}, False),
        ({"linger_ms": 0, "acks": "all", "idempotence": False}, True),
    ]
    for options, direct in cases:
        producer = Producer(brokers=["127.0.0.1:1"], metadata_max_age_s=0, **options)
        try:
            assert (producer._accumulator.direct is not None) is direct, options
            if direct:
                producer.acks = 0  # acks applies from now on: so does the choice
                assert producer._accumulator.direct is None
        finally:
            producer.close(timeout=1)


def test_an_acknowledgement_wakes_the_sender_only_when_its_partition_has_more() -> None:
    import threading

    class Counting(threading.Condition):
        notified = 0

        def notify(self, n: int = 1) -> None:
            Counting.notified += 1
            super().notify(n)

    acc, cluster, sender, now = direct_setup()
    acc._wake = Counting(acc.lock)
    thread, drained = idle_sender(acc)
    acc.append(TP, [b"a"], 1, None, 5)  # sent directly: nobody woken
    answer(cluster.conn.requests[0], [["t", 0, 0, 100, None]])
    assert Counting.notified == 0  # nothing more to send: the sender sleeps on
    acc.append(TP, [b"b"], 1, None, 5)  # direct again
    acc.append(TP, [b"c"], 1, None, 5)  # in flight: queued, the sender is told
    woken = Counting.notified
    answer(cluster.conn.requests[1], [["t", 0, 0, 200, None]])
    assert Counting.notified == woken + 1  # "c" waits: the acknowledgement wakes it
    thread.join(10)
    assert [b.values for b in drained[0][TP]] == [[b"c"]]
    acc.close()
