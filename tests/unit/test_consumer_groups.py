"""The KIP-848 consumer group state machine (broker/server/kafka/consumer_groups.py),
without IO: members, epochs, the assignors and reconciliation."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from broker.server.kafka.consumer_groups import (
    ConsumerGroupCoordinator,
    HeartbeatResult,
    TopicPartition,
    classic_assignment,
    range_assign,
    uniform_assign,
)

G = "g"
TOPICS = {"t": 4}


class Client:
    """A well-behaved member: it owns what its last answer listed, at its epoch."""

    def __init__(self, coordinator: ConsumerGroupCoordinator, member_id: str, topics: tuple[str, ...] = ("t",)):
        self.coordinator = coordinator
        self.id = member_id
        self.topics = topics
        self.epoch = 0
        self.owned: frozenset[TopicPartition] = frozenset()

    def beat(self, now: float, partitions: dict[str, int] | None = None, report: bool = True) -> HeartbeatResult:
        joining = self.epoch == 0
        result = self.coordinator.heartbeat(
            G,
            self.id,
            self.epoch,
            now,
            partitions or TOPICS,
            subscribed=self.topics if joining else None,
            owned=self.owned if report else None,
            rebalance_s=30.0 if joining else None,
        )
        if result.error == ErrorCode.none:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = result.assignment
        return result

    def leave(self, now: float) -> HeartbeatResult:
        return self.coordinator.heartbeat(G, self.id, -1, now, TOPICS)


def tps(*parts: int, topic: str = "t") -> frozenset[TopicPartition]:
    return frozenset((topic, p) for p in parts)


def never_shared(*clients: Client) -> None:
    seen: set[TopicPartition] = set()
    for c in clients:
        assert not (seen & c.owned), f"{c.id} owns {seen & c.owned} another member owns too"
        seen |= c.owned


def test_one_member_gets_every_partition_and_the_heartbeat_interval() -> None:
    coordinator = ConsumerGroupCoordinator(heartbeat_interval_s=2.5)
    a = Client(coordinator, "a")
    result = a.beat(0)
    assert result.error == ErrorCode.none
    assert result.member_epoch == 1 and result.heartbeat_interval_s == 2.5
    assert a.owned == tps(0, 1, 2, 3)
    again = a.beat(1)
    assert again.assignment is None  # unchanged: not sent again
    assert again.member_epoch == 1
    assert coordinator.describe(G).state == "Stable"  # type: ignore[union-attr]


def test_a_second_member_gets_partitions_only_after_the_first_gave_them_up() -> None:
    coordinator = ConsumerGroupCoordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.beat(0)
    joined = b.beat(1)
    assert joined.member_epoch == 2
    assert b.owned == frozenset()  # every partition is still a's
    never_shared(a, b)
    assert coordinator.describe(G).state == "Reconciling"  # type: ignore[union-attr]

    # a learns what to give up; its epoch stays until it confirms
    told = coordinator.heartbeat(G, "a", 1, 2, TOPICS, owned=None)
    assert told.member_epoch == 1 and told.assignment is not None
    keep = told.assignment
    assert len(keep) == 2
    assert b.beat(3).assignment is None  # a has not confirmed: b still waits
    # a reports without a list of owned partitions: it is assumed to own them still
    assert coordinator.heartbeat(G, "a", 1, 4, TOPICS, owned=None).member_epoch == 1
    assert b.beat(5).assignment is None

    a.owned = keep  # it revoked
    confirmed = a.beat(6)
    assert confirmed.member_epoch == 2
    never_shared(a, b)
    got = b.beat(7)
    assert got.assignment == tps(0, 1, 2, 3) - keep
    never_shared(a, b)
    assert a.owned | b.owned == tps(0, 1, 2, 3)
    assert coordinator.describe(G).state == "Stable"  # type: ignore[union-attr]


def test_partitions_never_owned_twice_through_joins_and_leaves() -> None:
    coordinator = ConsumerGroupCoordinator()
    clients = [Client(coordinator, name) for name in "abcd"]
    now = 0.0
    active: list[Client] = []
    for c in clients:
        active.append(c)
        for _ in range(4):
            for member in active:
                now += 0.1
                assert member.beat(now).error == ErrorCode.none
                never_shared(*active)
    assert sorted(len(c.owned) for c in active) == [1, 1, 1, 1]
    leaving = active.pop(0)
    assert leaving.leave(now).error == ErrorCode.none
    for _ in range(3):
        for member in active:
            now += 0.1
            member.beat(now)
            never_shared(*active)
    assert frozenset().union(*(c.owned for c in active)) == tps(0, 1, 2, 3)


def test_a_leave_frees_the_partitions() -> None:
    coordinator = ConsumerGroupCoordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.beat(0)
    b.beat(0.1)
    a.owned = coordinator.heartbeat(G, "a", 1, 0.2, TOPICS).assignment or a.owned
    a.beat(0.3)
    b.beat(0.4)
    assert len(a.owned) == len(b.owned) == 2
    left = a.leave(1)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    assert b.beat(2).assignment == tps(0, 1, 2, 3)
    assert coordinator.heartbeat(G, "a", 2, 3, TOPICS).error == ErrorCode.unknown_member_id


def test_a_silent_member_is_removed_after_the_session_timeout() -> None:
    coordinator = ConsumerGroupCoordinator(session_s=10)
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.beat(0)
    b.beat(1)
    assert coordinator.expire(9) == []
    b.beat(9)
    assert coordinator.expire(10.5) == [(G, "a")]
    assert b.beat(11).assignment == tps(0, 1, 2, 3)
    assert a.beat(12).error == ErrorCode.unknown_member_id


def test_a_member_that_never_revokes_is_removed_after_its_rebalance_timeout() -> None:
    coordinator = ConsumerGroupCoordinator(session_s=1000)
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.beat(0)
    b.beat(1)
    coordinator.heartbeat(G, "a", 1, 2, TOPICS)  # told to revoke, rebalance timeout 30 s
    assert coordinator.expire(31) == []
    assert coordinator.expire(32.5) == [(G, "a")]
    assert b.beat(33).assignment == tps(0, 1, 2, 3)


def test_stale_and_future_epochs_are_fenced_and_a_fenced_member_rejoins() -> None:
    coordinator = ConsumerGroupCoordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.beat(0)
    b.beat(1)
    assert coordinator.heartbeat(G, "a", 5, 2, TOPICS).error == ErrorCode.fenced_member_epoch
    a.owned = coordinator.heartbeat(G, "a", 1, 2, TOPICS).assignment or a.owned
    a.beat(3)
    assert a.epoch == 2
    # the previous epoch is accepted when what it owns is within its assignment (a lost answer)
    assert coordinator.heartbeat(G, "a", 1, 4, TOPICS, owned=a.owned).error == ErrorCode.none
    assert coordinator.heartbeat(G, "a", 1, 4, TOPICS, owned=tps(0, 1, 2, 3)).error == ErrorCode.fenced_member_epoch
    assert coordinator.heartbeat(G, "a", 0 - 0, 5, TOPICS, subscribed=("t",)).member_epoch >= 2  # rejoins
    assert coordinator.heartbeat(G, "nobody", 3, 5, TOPICS).error == ErrorCode.unknown_member_id


def test_offset_commits_check_the_member_epoch() -> None:
    coordinator = ConsumerGroupCoordinator()
    a = Client(coordinator, "a")
    a.beat(0)
    assert coordinator.check_commit(G, "a", 1) is None
    assert coordinator.check_commit(G, "a", 0) == ErrorCode.stale_member_epoch
    assert coordinator.check_commit(G, "a", 2) == ErrorCode.stale_member_epoch
    assert coordinator.check_commit(G, "b", 1) == ErrorCode.unknown_member_id

    # at its previous epoch, for partitions it still holds (its new epoch may be in flight)
    b = Client(coordinator, "b")
    b.beat(1)
    a.beat(2)  # told to revoke two: its epoch stays 1 until it confirms
    held = sorted(a.owned)
    a.beat(3)
    assert a.epoch == 2
    assert coordinator.check_commit(G, "a", 1, held) is None
    assert coordinator.check_commit(G, "a", 1, [("t", p) for p in range(4)]) == ErrorCode.stale_member_epoch


def test_new_partitions_and_subscriptions_bump_the_group_epoch() -> None:
    coordinator = ConsumerGroupCoordinator()
    a = Client(coordinator, "a")
    a.beat(0)
    grown = a.beat(1, {"t": 6})
    assert grown.member_epoch == 2 and a.owned == tps(0, 1, 2, 3, 4, 5)
    b = Client(coordinator, "b", ("u",))
    b.beat(2, {"t": 6, "u": 2})
    assert b.owned == tps(0, 1, topic="u")
    kept = a.beat(3, {"t": 6, "u": 2})  # b's topic is not a's: a new epoch, the same partitions
    assert kept.member_epoch == 3 and a.owned == tps(0, 1, 2, 3, 4, 5)
    assert coordinator.describe(G).group_epoch == 3  # type: ignore[union-attr]


def test_an_unknown_assignor_is_refused() -> None:
    coordinator = ConsumerGroupCoordinator()
    result = coordinator.heartbeat(G, "a", 0, 0, TOPICS, subscribed=("t",), assignor="sticky")
    assert result.error == ErrorCode.unsupported_assignor


@pytest.mark.parametrize("previous", [None, {"a": set(tps(0, 1, 2, 3, 4))}])
def test_uniform_is_even_deterministic_and_sticky(previous: dict[str, set[TopicPartition]] | None) -> None:
    subs = {"c": ["t"], "a": ["t"], "b": ["t"]}
    first = uniform_assign(subs, {"t": 5}, previous)
    assert first == uniform_assign(dict(reversed(list(subs.items()))), {"t": 5}, previous)
    assert sorted(len(v) for v in first.values()) == [1, 2, 2]
    assert set().union(*first.values()) == set(tps(0, 1, 2, 3, 4))
    if previous:
        assert len(first["a"] & previous["a"]) == 2  # a keeps its share
    again = uniform_assign({"a": ["t"], "b": ["t"], "c": ["t"], "d": ["t"]}, {"t": 5}, first)
    moved = sum(len(first[m] - again[m]) for m in first)
    assert moved == 1


def test_range_gives_contiguous_ranges_per_topic() -> None:
    out = range_assign({"b": ["t", "u"], "a": ["t"]}, {"t": 5, "u": 2})
    assert out == {"a": set(tps(0, 1, 2)), "b": set(tps(3, 4)) | set(tps(0, 1, topic="u"))}


def test_the_classic_assignment_bytes() -> None:
    raw = classic_assignment([("t", 1), ("t", 0)])
    assert raw == struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">iiii", 2, 0, 1, -1)
