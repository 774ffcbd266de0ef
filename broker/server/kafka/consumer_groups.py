"""Kafka's consumer group protocol (KIP-848): the coordinator's state machine, sans IO.

A member talks to its coordinator with one request, ConsumerGroupHeartbeat, and the
coordinator decides everything: the assignment (a server-side assignor) and when each
member may take each partition. No rebalance barrier, no group leader.

Epochs:

- the **group epoch** counts the group's changes that can move partitions: a member
  joins or leaves, a subscription changes, a subscribed topic gains partitions. Each
  bump computes a new **target assignment** (``uniform`` or ``range``, deterministic),
  whose epoch is that group epoch;
- a **member epoch** is the target epoch a member has reconciled to. A member moves to
  the target epoch in two steps, as Kafka's ``CurrentAssignmentBuilder`` does:

  1. REVOKING: the partitions it holds but the target gives to others are taken out of
     its assignment (its answer lists only what it keeps); its epoch stays. It stays
     there until a heartbeat's owned partitions (``topic_partitions``, not null) no
     longer include any of them; past its rebalance timeout it is removed.
  2. then its epoch becomes the target epoch and it is given the partitions of its
     target that no other member holds, assigned or still revoking; the others
     (UNRELEASED) are given on a later heartbeat, once their owner gave them up.

So a partition is never held by two members at once. A heartbeat with a member epoch
above the member's, or below it (except the previous epoch with owned partitions inside
the current assignment: the last answer was lost) is FENCED_MEMBER_EPOCH; an unknown
member with an epoch other than 0 is UNKNOWN_MEMBER_ID; epoch 0 joins (or, for a known
member that was fenced, rejoins with nothing); -1 (and -2: static membership is not
served) leaves. A member silent past the session timeout is removed, its partitions
freed. The coordinator tells each member the heartbeat interval.

Nothing here does IO or reads a clock: every call takes ``now`` (monotonic seconds).
:mod:`broker.server.kafka.consumer_group_service` answers the api with it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

TopicPartition = tuple[str, int]

HEARTBEAT_INTERVAL_S = 1.0
"""How often members heartbeat (Kafka's ``group.consumer.heartbeat.interval.ms`` is 5 s;
shorter here, so a partition moves within a second or two of a member joining)."""
SESSION_TIMEOUT_S = 45.0
"""A member silent this long is removed (Kafka's ``group.consumer.session.timeout.ms``)."""
ASSIGNORS = ("uniform", "range")
"""The server-side assignors, the default first (Kafka's names)."""


@dataclass
class HeartbeatResult:
    """What a ConsumerGroupHeartbeat answers."""

    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    assignment: frozenset[TopicPartition] | None = None
    """The partitions the member may own now; None: unchanged since the last answer."""


@dataclass
class _Member:
    id: str
    subscribed: tuple[str, ...]
    rebalance_s: float
    deadline: float
    client_id: str = ""
    client_host: str = ""
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    assigned: set[TopicPartition] = field(default_factory=set)
    """What the member may own at its epoch (what its answers list)."""
    revoking: set[TopicPartition] = field(default_factory=set)
    """Taken from it; it owns them until a heartbeat says otherwise."""
    revoke_deadline: float | None = None
    sent: tuple[int, frozenset[TopicPartition]] | None = None
    """The (epoch, assignment) of the last answer that carried an assignment."""


@dataclass
class ConsumerMemberView:
    """One member as DescribeGroups shows it."""

    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    subscribed: tuple[str, ...]
    assigned: list[TopicPartition]
    """What it owns now (sorted): its assignment and what it is still revoking."""
    target: list[TopicPartition]
    """What the target assignment gives it (sorted)."""


@dataclass
class ConsumerGroupView:
    """A consumer group as DescribeGroups and ListGroups show it."""

    group_id: str
    state: str
    """Kafka's name: Empty, Reconciling or Stable."""
    group_epoch: int
    assignment_epoch: int
    """The epoch of the target assignment."""
    assignor: str
    members: list[ConsumerMemberView]


class _Group:
    def __init__(self, group_id: str):
        self.id = group_id
        self.epoch = 0
        self.target_epoch = 0
        self.target: dict[str, set[TopicPartition]] = {}
        self.members: dict[str, _Member] = {}
        self.partitions: dict[str, int] = {}
        """Each subscribed topic's partition count when the target was computed."""
        self.assignor = ASSIGNORS[0]

    def owned_by_others(self, member_id: str) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for m in self.members.values():
            if m.id != member_id:
                out |= m.assigned | m.revoking
        return out


class ConsumerGroupCoordinator:
    """Every consumer-protocol group this broker coordinates."""

    def __init__(self, heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S, session_s: float = SESSION_TIMEOUT_S):
        self.heartbeat_interval_s = heartbeat_interval_s
        self.session_s = session_s
        self.groups: dict[str, _Group] = {}

    def __contains__(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer group with members here."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        now: float,
        partitions: Mapping[str, int],
        subscribed: Iterable[str] | None = None,
        owned: Iterable[TopicPartition] | None = None,
        rebalance_s: float | None = None,
        assignor: str | None = None,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        """One heartbeat. ``partitions``: every topic's partition count now (topics
        absent are not assigned); ``subscribed``, ``owned``, ``rebalance_s`` and
        ``assignor`` are None when unchanged since the member's last heartbeat."""
        if not member_id:
            return HeartbeatResult(ErrorCode.invalid_request, "a member id is required", member_id)
        if assignor is not None and assignor not in ASSIGNORS:
            return HeartbeatResult(
                ErrorCode.unsupported_assignor, f"assignor {assignor!r}: served are {', '.join(ASSIGNORS)}", member_id
            )
        group = self.groups.get(group_id)
        if member_epoch < 0:
            return self._leave(group, member_id, member_epoch, partitions)
        owned_set = None if owned is None else set(owned)
        member = group.members.get(member_id) if group is not None else None
        if member_epoch == 0:
            if subscribed is None and member is None:
                return HeartbeatResult(
                    ErrorCode.invalid_request, "a joining member must give its subscription", member_id
                )
            if group is None:
                group = self.groups[group_id] = _Group(group_id)
            if member is None:
                member = group.members[member_id] = _Member(member_id, (), rebalance_s or 300.0, 0.0)
            else:  # fenced, it rejoins having dropped everything
                member.assigned.clear()
                member.revoking.clear()
                member.epoch, member.previous_epoch, member.sent = 0, -1, None
            owned_set = set()
        elif member is None or group is None:
            return HeartbeatResult(
                ErrorCode.unknown_member_id, f"member {member_id} is not in group {group_id}", member_id
            )
        elif member_epoch != member.epoch and not (
            member_epoch == member.previous_epoch and owned_set is not None and owned_set <= member.assigned
        ):
            return HeartbeatResult(
                ErrorCode.fenced_member_epoch,
                f"member epoch {member_epoch}, the group's is {member.epoch} for this member: rejoin",
                member_id,
            )
        member.deadline = now + self.session_s
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        if rebalance_s is not None and rebalance_s > 0:
            member.rebalance_s = rebalance_s
        changed = member_epoch == 0
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            changed = True
        if assignor is not None and assignor != member.assignor:
            member.assignor = assignor
            changed = True
        if changed or self._partitions_changed(group, partitions):
            self._new_target(group, partitions)
        self._reconcile(group, member, owned_set, now)
        current = (member.epoch, frozenset(member.assigned))
        send = current if current != member.sent or member_epoch == 0 else None
        if owned_set is not None and owned_set != member.assigned:
            send = current  # it holds something else than we think: say it again
        if send is not None:
            member.sent = send
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member_id,
            member.epoch,
            self.heartbeat_interval_s,
            None if send is None else send[1],
        )

    def _leave(
        self, group: _Group | None, member_id: str, epoch: int, partitions: Mapping[str, int]
    ) -> HeartbeatResult:
        if group is None or member_id not in group.members:
            return HeartbeatResult(ErrorCode.unknown_member_id, f"member {member_id} is not in the group", member_id)
        self._remove(group, member_id, partitions)
        return HeartbeatResult(ErrorCode.none, None, member_id, epoch, self.heartbeat_interval_s)

    def _remove(self, group: _Group, member_id: str, partitions: Mapping[str, int] | None = None) -> None:
        group.members.pop(member_id, None)
        self._new_target(group, partitions if partitions is not None else group.partitions)

    @staticmethod
    def _partitions_changed(group: _Group, partitions: Mapping[str, int]) -> bool:
        topics = {t for m in group.members.values() for t in m.subscribed}
        return any(partitions.get(t, 0) != group.partitions.get(t, 0) for t in topics)

    def _new_target(self, group: _Group, partitions: Mapping[str, int]) -> None:
        """Bump the group epoch and compute the target assignment at it."""
        group.epoch += 1
        topics = {t for m in group.members.values() for t in m.subscribed}
        group.partitions = {t: partitions[t] for t in topics if partitions.get(t, 0) > 0}
        chosen = [m.assignor for m in group.members.values() if m.assignor]
        group.assignor = chosen[0] if chosen else ASSIGNORS[0]
        subs = {m.id: m.subscribed for m in group.members.values()}
        if group.assignor == "range":
            group.target = range_assign(subs, group.partitions)
        else:
            group.target = uniform_assign(subs, group.partitions, group.target)
        group.target_epoch = group.epoch

    def _reconcile(self, group: _Group, member: _Member, owned: set[TopicPartition] | None, now: float) -> None:
        target = group.target.get(member.id, set())
        taken = member.assigned - target
        if taken:  # step 1: revoke what the target gives to others
            member.assigned -= taken
            member.revoking |= taken
            member.revoke_deadline = now + member.rebalance_s
        back = member.revoking & target  # given back to it by a newer target
        member.revoking -= back
        member.assigned |= back
        if member.revoking and owned is not None and not (owned & member.revoking):
            member.revoking.clear()  # it confirmed
        if member.revoking:
            return
        member.revoke_deadline = None
        if member.epoch != group.target_epoch:  # step 2: the new epoch, and what is free
            member.previous_epoch, member.epoch = member.epoch, group.target_epoch
        member.assigned |= target - group.owned_by_others(member.id)

    def check_commit(
        self, group_id: str, member_id: str, member_epoch: int, partitions: Iterable[TopicPartition] = ()
    ) -> ErrorCode | None:
        """Whether an OffsetCommit of this member at this epoch may be applied: at its
        epoch, or at its previous one for partitions it still holds (the answer that
        moved it on may be in flight while it commits, as KIP-1251 allows)."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch == member.epoch:
            return None
        if member_epoch == member.previous_epoch > 0 and set(partitions) <= member.assigned | member.revoking:
            return None
        return ErrorCode.stale_member_epoch

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Remove members silent past the session timeout, or still revoking past their
        rebalance timeout; the ``(group, member)`` removed."""
        gone = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                late = member.revoke_deadline is not None and member.revoke_deadline < now
                if member.deadline < now or late:
                    self._remove(group, member.id)
                    gone.append((group.id, member.id))
        return gone

    def describe(self, group_id: str) -> ConsumerGroupView | None:
        """The group's state and members; None when this coordinator does not know it."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        members = [
            ConsumerMemberView(
                m.id,
                m.client_id,
                m.client_host,
                m.epoch,
                m.subscribed,
                sorted(m.assigned | m.revoking),
                sorted(group.target.get(m.id, set())),
            )
            for m in group.members.values()
        ]
        if not group.members:
            state = "Empty"
        elif all(
            m.epoch == group.target_epoch and not m.revoking and m.assigned == group.target.get(m.id, set())
            for m in group.members.values()
        ):
            state = "Stable"
        else:
            state = "Reconciling"
        return ConsumerGroupView(group.id, state, group.epoch, group.target_epoch, group.assignor, members)

    def forget(self, group_id: str) -> bool:
        """Drop an empty group (DeleteGroups); False when it has members."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            return False
        del self.groups[group_id]
        return True


# -- assignors -------------------------------------------------------------------------


def uniform_assign(
    subscriptions: Mapping[str, Iterable[str]],
    partitions: Mapping[str, int],
    previous: Mapping[str, set[TopicPartition]] | None = None,
) -> dict[str, set[TopicPartition]]:
    """Spread every subscribed partition evenly over its subscribers, keeping each
    member's previous partitions up to its share (few move): Kafka's ``uniform``.
    Deterministic: members in id order, partitions in (topic, partition) order."""
    members = sorted(subscriptions)
    subs = {m: set(subscriptions[m]) for m in members}
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    every = sorted((t, p) for t in {t for s in subs.values() for t in s} for p in range(partitions.get(t, 0)))
    owner = {tp: m for m in members for tp in (previous or {}).get(m, set()) if tp[0] in subs[m]}
    free = []
    for tp in every:  # a previous owner keeps it while under its even share, rounded down
        m = owner.get(tp)
        if m is not None and len(out[m]) < _floor_share(m, subs, partitions):
            out[m].add(tp)
        else:
            free.append(tp)
    for tp in free:  # each to the least loaded subscriber, its previous owner on a tie
        candidates = [m for m in members if tp[0] in subs[m]]
        if candidates:
            out[min(candidates, key=lambda m: (len(out[m]), owner.get(tp) != m, m))].add(tp)
    return out


def _floor_share(member: str, subs: Mapping[str, set[str]], partitions: Mapping[str, int]) -> int:
    """An even share for ``member``: its subscribed partitions over the members that
    subscribe to any of its topics, rounded down."""
    total = sum(partitions.get(t, 0) for t in subs[member])
    sharing = sum(1 for s in subs.values() if s & subs[member])
    return total // max(sharing, 1)


def range_assign(
    subscriptions: Mapping[str, Iterable[str]], partitions: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    """Each topic's partitions in contiguous ranges over its subscribers in id order,
    the first ones one more when they do not divide evenly: Kafka's ``range``."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topics = sorted({t for s in subscriptions.values() for t in s})
    for topic in topics:
        subscribers = sorted(m for m, s in subscriptions.items() if topic in s)
        n = partitions.get(topic, 0)
        base, extra = divmod(n, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            size = base + (1 if i < extra else 0)
            out[m] |= {(topic, p) for p in range(start, start + size)}
            start += size
    return out


# -- the classic views of a consumer group ---------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def classic_subscription(topics: Iterable[str]) -> bytes:
    """ConsumerProtocolSubscription v0 (version, topics, null user data): the member
    metadata DescribeGroups shows for a consumer group's member."""
    names = sorted(topics)
    return _I16.pack(0) + _I32.pack(len(names)) + b"".join(_string(t) for t in names) + _I32.pack(-1)


def classic_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """ConsumerProtocolAssignment v0 (version, topics with their partitions, null user
    data): the member assignment DescribeGroups shows, as Kafka's tools read it."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    out = [_I16.pack(0), _I32.pack(len(by_topic))]
    for topic, parts in by_topic.items():
        out.append(_string(topic) + _I32.pack(len(parts)) + b"".join(_I32.pack(p) for p in parts))
    out.append(_I32.pack(-1))
    return b"".join(out)


__all__ = [
    "ASSIGNORS",
    "ConsumerGroupCoordinator",
    "ConsumerGroupView",
    "ConsumerMemberView",
    "HEARTBEAT_INTERVAL_S",
    "HeartbeatResult",
    "SESSION_TIMEOUT_S",
    "TopicPartition",
    "classic_assignment",
    "classic_subscription",
    "range_assign",
    "uniform_assign",
]
