"""The producer gives up requests waiting on a broker that no longer leads their
partition (broker/client/leader_check.py): the rule, the look-up's pacing, and the
sender retrying the same bytes on the new leader. Fakes for the cluster and the
connections, no sockets, no threads; the nemesis that found it is
tests/replication/test_nemesis_leader_isolated.py, and
tests/replication/test_replication.py has it with real brokers (a frozen leader)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from broker.client.accumulator import Accumulator
from broker.client.cluster import Cluster
from broker.client.leader_check import CHECK_AFTER_S, CHECK_EVERY_S, LeaderCheck, PendingRequest, moved_requests
from broker.client.sender import RetryPolicy, Sender
from broker.common.errors import BrokerNotAvailableError, RequestTimedOutError
from broker.wire import records

OLD, NEW = ("10.0.0.1", 9092), ("10.0.0.2", 9092)


def pending(sent_at: float, address=OLD, partitions=(("t", 0),), connection: Any = None) -> PendingRequest:
    return PendingRequest(id(partitions), sent_at, connection, address, list(partitions))


def test_a_request_moves_when_one_of_its_partitions_is_led_elsewhere() -> None:
    leaders = {("t", 0): OLD, ("t", 1): NEW, ("t", 2): None}
    same, moved, electing = pending(0), pending(0, partitions=[("t", 0), ("t", 1)]), pending(0, partitions=[("t", 2)])
    assert moved_requests([same, moved, electing], lambda t, p: leaders[(t, p)]) == [(moved, ("t", 1), NEW)]


class FakeCluster:
    """Answers a look-up with the leaders it is told; records what it was asked."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], tuple[str, int] | None] = {("t", 0): OLD}
        self.asked: list[tuple[list[str], set, float | None]] = []
        self.error: Exception | None = None
        self.connections: dict[tuple[str, int], FakeConnection] = {}

    def refresh(self, topics=None, create=False, avoid=(), timeout=None):
        self.asked.append((list(topics), set(avoid), timeout))
        if self.error is not None:
            raise self.error
        return {}

    def cached_leader_address(self, topic: str, partition: int):
        return self.leaders.get((topic, partition))

    # what the sender needs besides
    def leader_address(self, topic: str, partition: int) -> tuple[str, int]:
        address = self.leaders[(topic, partition)]
        assert address is not None
        return address

    def connection(self, address):
        conn = self.connections.get(address)
        if conn is None or conn.closed:
            conn = self.connections[address] = FakeConnection(address)
        return conn

    def forget(self, topic: str) -> None:
        pass


def test_a_look_up_waits_for_a_second_of_silence_runs_one_at_a_time_and_skips_the_silent_broker() -> None:
    cluster, moved, spawned = FakeCluster(), [], []
    check = LeaderCheck(cluster, lambda *m: moved.append(m), clock=lambda: 0.0, spawn=spawned.append)
    request = pending(10.0)
    check.poll([request], 10.0 + CHECK_AFTER_S)  # not yet past a second
    assert spawned == []
    check.poll([request], 10.0 + CHECK_AFTER_S + 0.01)
    check.poll([request], 10.0 + CHECK_AFTER_S + 0.02 + CHECK_EVERY_S)  # the first still runs
    assert len(spawned) == 1
    spawned.pop()()  # the look-up: nothing moved
    assert cluster.asked == [(["t"], {OLD}, 3.0)] and moved == []
    check.poll([request], 10.0 + CHECK_AFTER_S + 0.02)  # too soon after the last
    assert spawned == []
    cluster.leaders[("t", 0)] = NEW
    check.poll([request], 10.0 + CHECK_AFTER_S + 0.02 + CHECK_EVERY_S)
    spawned.pop()()
    assert moved == [(request, ("t", 0), NEW)]


def test_a_look_up_that_fails_moves_nothing_and_the_next_one_may_run() -> None:
    cluster, moved = FakeCluster(), []
    check = LeaderCheck(cluster, lambda *m: moved.append(m), clock=lambda: 0.0, spawn=lambda fn: fn())
    cluster.error = RequestTimedOutError("no answer within 3.0s")
    cluster.leaders[("t", 0)] = NEW
    check.poll([pending(0.0)], 5.0)
    assert moved == [] and len(cluster.asked) == 1
    cluster.error = None
    check.poll([pending(0.0)], 5.0 + CHECK_EVERY_S)
    assert len(cluster.asked) == 2 and len(moved) == 1


class FakeConnection:
    """Records requests; closing fails the unanswered ones, as a real connection does."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.requests: list = []
        self.closed = False

    def request(self, api, fields, payload, expect_response=True, callback=None):
        future = SimpleNamespace(error=None, frame=None, done=lambda: False)
        self.requests.append((list(payload), future, callback))
        return future

    def close(self) -> None:
        self.closed = True
        for _, future, callback in self.requests:
            if future.frame is None and future.error is None:
                future.error = BrokerNotAvailableError(f"connection to {self.address} was closed")
                callback(future)


def test_the_sender_retries_a_waiting_batch_on_the_new_leader_with_the_same_bytes() -> None:
    now = [100.0]
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
    sender = Sender(
        acc,
        cluster,  # type: ignore[arg-type]
        acks=-1,
        codec=records.CODEC_NONE,
        request_timeout=30.0,
        max_request_bytes=1 << 20,
        retry=RetryPolicy(None, 0.1, 120.0, rng=lambda: 0.0),
        clock=lambda: now[0],
    )
    sender.leader_check.spawn = lambda fn: fn()
    future = acc.append(("t", 0), [b"a", b"b"], 2, None, 5)
    sender.send(acc.ready(now[0])[0])
    [(sent, _, _)] = cluster.connections[OLD].requests

    now[0] += CHECK_AFTER_S / 2
    sender._expire_requests(now[0])  # waiting, not yet for long: not looked up
    assert cluster.asked == []
    now[0] += CHECK_AFTER_S
    sender._expire_requests(now[0])  # looked up: the old broker still leads
    assert len(cluster.asked) == 1 and not cluster.connections[OLD].closed

    cluster.leaders[("t", 0)] = NEW  # elected while the old one is silent
    now[0] += CHECK_EVERY_S
    sender._expire_requests(now[0])
    assert cluster.connections[OLD].closed and not future.done()  # retrying, not failed
    now[0] += 0.1  # the backoff
    sender.send(acc.ready(now[0])[0])
    [(retried, retry_future, callback)] = cluster.connections[NEW].requests
    assert retried == sent  # the same bytes: the new leader dedups if it holds them
    retry_future.frame = SimpleNamespace(header={"parts": [["t", 0, 0, 4096, None]]})
    callback(retry_future)
    assert future.wait(0) == 4096
    assert sender.metrics()["retries"] == 1 and sender.metrics()["batches_failed"] == 0


class ScriptedConnection:
    """Answers a metadata request with ``answer`` or raises ``error``; records the ask."""

    def __init__(self, address, asked: list, answer=None, error: Exception | None = None) -> None:
        self.address, self.asked, self.answer, self.error = address, asked, answer, error

    def call(self, api, fields, timeout):
        self.asked.append((self.address, timeout))
        if self.error is not None:
            raise self.error
        return SimpleNamespace(header=self.answer)


def test_the_look_up_skips_the_silent_brokers_and_moves_on_from_one_that_times_out() -> None:
    third = ("10.0.0.3", 9092)
    cluster = Cluster(brokers=["10.0.0.1:9092", "10.0.0.2:9092", "10.0.0.3:9092"])
    asked: list = []
    answer = {"brokers": {2: ["10.0.0.2", 9092]}, "topics": {"t": {"partitions": {0: 2}}}}
    conns = {
        OLD: ScriptedConnection(OLD, asked, answer),
        NEW: ScriptedConnection(NEW, asked, answer),
        third: ScriptedConnection(third, asked, error=RequestTimedOutError("no response within 3.0s")),
    }
    cluster.connection = conns.__getitem__  # type: ignore[method-assign]
    for _ in range(5):  # whichever order the shuffle picks
        asked.clear()
        cluster.refresh(["t"], avoid={OLD}, timeout=3.0)
        assert OLD not in [a for a, _ in asked] and asked[-1] == (NEW, 3.0)
        assert cluster.cached_leader_address("t", 0) == NEW
    # Without a timeout of its own a refresh keeps its old rule: a timeout is an error.
    conns[NEW].error = RequestTimedOutError("no response within 30.0s")
    with pytest.raises(RequestTimedOutError):
        cluster.refresh(["t"], avoid={OLD, third})
    with pytest.raises(BrokerNotAvailableError, match="which were skipped"):
        cluster.refresh(["t"], avoid={OLD, NEW, third}, timeout=3.0)
