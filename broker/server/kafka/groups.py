"""Kafka consumer groups: the coordinator's membership state machine, in memory.

Each group has one coordinator, the live Kafka-speaking broker its id hashes to
(:func:`coordinator_for`), so every broker names the same one without talking to the
others. The coordinator runs Kafka's classic protocol: JoinGroup gathers the members
(a rebalance ends when every known member has rejoined or the longest rebalance timeout
passed), the leader's SyncGroup hands out the assignment, Heartbeat keeps a member
alive (and tells it a rebalance began), LeaveGroup and missed heartbeats remove it.
Membership is not persisted: when a coordinator moves (a broker stops), clients get
NOT_COORDINATOR, find the new one and join again, as after a Kafka coordinator
failover. Committed offsets live in ZooKeeper (:mod:`broker.server.kafka.service`).

This module holds no IO except asyncio futures and a timer; the api handlers call it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import zlib
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_REBALANCE_DELAY_S = 0.3
"""How long the first join into an empty group waits for more members (Kafka's
``group.initial.rebalance.delay.ms``, shortened): fewer rebalances when a group starts."""


def coordinator_for(group: str, brokers: list[int]) -> int:
    """The coordinator of ``group`` among the sorted Kafka-speaking live ``brokers``."""
    if not brokers:
        return -1
    ordered = sorted(brokers)
    return ordered[zlib.crc32(group.encode()) % len(ordered)]


@dataclass
class JoinResult:
    """What a JoinGroup answers."""

    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, bytes]] = field(default_factory=list)
    """Only for the leader: every member's id and metadata for the chosen protocol."""


@dataclass
class _Member:
    id: str
    protocols: list[tuple[str, bytes]]
    session_s: float
    rebalance_s: float
    deadline: float
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[tuple[ErrorCode, bytes]] | None = None
    assignment: bytes = b""
    client_id: str = ""
    client_host: str = ""


KAFKA_STATES = {
    "empty": "Empty",
    "preparing": "PreparingRebalance",
    "syncing": "CompletingRebalance",
    "stable": "Stable",
}
"""Our group states by the names Kafka's DescribeGroups and ListGroups answer."""


@dataclass
class MemberView:
    """One member as DescribeGroups shows it."""

    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    """Its metadata for the group's chosen protocol."""
    assignment: bytes


@dataclass
class GroupView:
    """A group as DescribeGroups and ListGroups show it."""

    group_id: str
    state: str
    """Kafka's name: Empty, PreparingRebalance, CompletingRebalance, Stable or Dead."""
    protocol_type: str
    protocol: str
    members: list[MemberView]


class _Group:
    def __init__(self, group_id: str):
        self.id = group_id
        self.state = "empty"  # empty | preparing | syncing | stable
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader = ""
        self.members: dict[str, _Member] = {}
        self.pending: set[str] = set()
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined."""
        self.timer: asyncio.TimerHandle | None = None


class GroupCoordinator:
    """Every Kafka group this broker coordinates."""

    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {}

    def _group(self, group_id: str) -> _Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = _Group(group_id)
        return group

    # -- JoinGroup ---------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_s: float,
        rebalance_s: float,
        require_known_member: bool,
        client_host: str = "",
    ) -> JoinResult:
        """Join (or rejoin) and wait for the rebalance to complete."""
        group = self._group(group_id)
        if group.members and group.protocol_type != protocol_type:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if group.members and not _common_protocol(group, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member:
                group.pending.add(member_id)
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        elif member_id not in group.members and member_id not in group.pending:
            return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
        group.pending.discard(member_id)
        loop = asyncio.get_running_loop()
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = _Member(member_id, protocols, session_s, rebalance_s, 0.0)
        member.protocols, member.session_s, member.rebalance_s = protocols, session_s, rebalance_s
        member.client_id, member.client_host = client_id, client_host
        member.deadline = time.monotonic() + session_s
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(ErrorCode.rebalance_in_progress, member_id=member_id))
        member.join = loop.create_future()
        group.protocol_type = protocol_type
        future = member.join
        self._begin_rebalance(group)
        if all(m.join is not None and not m.join.done() for m in group.members.values()) and group.generation > 0:
            self._complete_join(group)
        return await future

    def _begin_rebalance(self, group: _Group) -> None:
        if group.state == "preparing":
            return
        for member in group.members.values():  # a sync in flight is for the old generation
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((ErrorCode.rebalance_in_progress, b""))
        first = group.state == "empty" or group.generation == 0
        group.state = "preparing"
        loop = asyncio.get_running_loop()
        wait = INITIAL_REBALANCE_DELAY_S if first else max((m.rebalance_s for m in group.members.values()), default=1.0)
        if group.timer is not None:
            group.timer.cancel()
        group.timer = loop.call_later(wait, self._rebalance_deadline, group)

    def _rebalance_deadline(self, group: _Group) -> None:
        """The rebalance timeout passed: members that did not rejoin are out."""
        group.timer = None
        if group.state != "preparing":
            return
        for member_id in [m.id for m in group.members.values() if m.join is None or m.join.done()]:
            self._remove(group, member_id)
        if group.members:
            self._complete_join(group)
        else:
            group.state = "empty"

    def _complete_join(self, group: _Group) -> None:
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        group.generation += 1
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol = _common_protocol(group, group.members[group.leader].protocols)
        group.state = "syncing"
        members = [(m.id, dict(m.protocols).get(group.protocol or "", b"")) for m in group.members.values()]
        now = time.monotonic()
        for member in group.members.values():
            member.deadline = now + member.session_s
            if member.join is not None and not member.join.done():
                member.join.set_result(
                    JoinResult(
                        ErrorCode.none,
                        group.generation,
                        group.protocol_type,
                        group.protocol,
                        group.leader,
                        member.id,
                        members if member.id == group.leader else [],
                    )
                )
            member.join = None

    # -- DescribeGroups, ListGroups -------------------------------------------------------

    def describe(self, group_id: str) -> GroupView | None:
        """The group's state and members; None when this coordinator does not know it."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        state = "empty" if not group.members else group.state
        protocol = group.protocol or ""
        members = [
            MemberView(
                m.id,
                m.client_id,
                m.client_host,
                dict(m.protocols).get(protocol, b""),
                m.assignment if group.state == "stable" else b"",
            )
            for m in group.members.values()
        ]
        return GroupView(
            group.id, KAFKA_STATES[state], group.protocol_type or "", protocol if state != "empty" else "", members
        )

    def listing(self) -> list[GroupView]:
        """Every group this coordinator knows, without members, sorted by id."""
        out = []
        for group_id in sorted(self.groups):
            view = self.describe(group_id)
            if view is not None:
                view.members = []
                out.append(view)
        return out

    # -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> tuple[ErrorCode, bytes]:
        """The member's assignment once the leader has sent them all."""
        group = self.groups.get(group_id)
        error = self._check(group, generation, member_id)
        if error is not None:
            return error, b""
        assert group is not None
        member = group.members[member_id]
        member.deadline = time.monotonic() + member.session_s
        if group.state == "stable":
            return ErrorCode.none, member.assignment
        member.sync = asyncio.get_running_loop().create_future()
        future = member.sync
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.id, b"")
            group.state = "stable"
            for m in group.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result((ErrorCode.none, m.assignment))
                m.sync = None
        return await future

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        """Keep a member alive; tell it when it must rejoin."""
        group = self.groups.get(group_id)
        error = self._check(group, generation, member_id)
        if error is not None:
            return error
        assert group is not None
        group.members[member_id].deadline = time.monotonic() + group.members[member_id].session_s
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        """Remove a member; the rest rebalance."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        self._remove(group, member_id)
        self._after_departure(group)
        return ErrorCode.none

    def check_commit(self, group_id: str, generation: int, member_id: str) -> ErrorCode | None:
        """Whether an offset commit may be applied (a standalone consumer, generation
        -1, always may)."""
        if generation < 0 and not member_id:
            return None
        group = self.groups.get(group_id)
        error = self._check(group, generation, member_id, commit=True)
        if error is None and group is not None:
            member = group.members[member_id]
            member.deadline = time.monotonic() + member.session_s
        return error

    def expire(self, now: float) -> None:
        """Remove members whose session passed without a heartbeat (called periodically)."""
        for group in list(self.groups.values()):
            gone = [m.id for m in group.members.values() if m.deadline < now and (m.join is None or m.join.done())]
            for member_id in gone:
                self._remove(group, member_id)
            if gone:
                self._after_departure(group)

    def _after_departure(self, group: _Group) -> None:
        if not group.members:
            if group.timer is not None:
                group.timer.cancel()
                group.timer = None
            group.state = "empty"
            group.leader = ""
            return
        if group.state == "preparing" and all(m.join is not None and not m.join.done() for m in group.members.values()):
            self._complete_join(group)
        else:
            self._begin_rebalance(group)

    def _remove(self, group: _Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
        if member.sync is not None and not member.sync.done():
            member.sync.set_result((ErrorCode.unknown_member_id, b""))

    @staticmethod
    def _check(group: _Group | None, generation: int, member_id: str, commit: bool = False) -> ErrorCode | None:
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        if group.state == "preparing":
            return ErrorCode.rebalance_in_progress
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return None


def _common_protocol(group: _Group, preferred: list[tuple[str, bytes]]) -> str | None:
    """The first of ``preferred``'s protocols every member supports."""
    for name, _ in preferred:
        if all(name in dict(m.protocols) for m in group.members.values()):
            return name
    return None


__all__ = ["GroupCoordinator", "GroupView", "JoinResult", "KAFKA_STATES", "MemberView", "coordinator_for"]
