"""The Kafka group apis: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups and ListGroups.

Membership is :class:`~broker.server.kafka.groups.GroupCoordinator`'s (in memory, on
the group's coordinator). Committed offsets are kept in ZooKeeper where native groups
keep theirs, ``/consumers/<group>/offsets/<topic>/<p>`` as ``{offset, skip, time}``
(the batch's byte offset and the messages of it consumed), so a position committed by
a Kafka client is where a native consumer of the group resumes and the other way
round. A Kafka offset is a message offset (:mod:`broker.server.kafka.offsets`):
``k`` becomes ``(b, skip)``, the batch holding message ``k`` and how many of its
messages come before it, found in this broker's copy of the partition. The exact
``k`` is also kept in ``/consumers/<group>/kafka_offsets/<topic>/<p>`` as ``{offset,
unit: "message", time}``: the only record when this broker holds no copy (native
consumers do not see that one). OffsetFetch answers the newer of the two, in message
offsets; a commit there without ``unit`` was written before message offsets (a byte
offset, the i-th message of the batch at byte ``b`` being ``b + i``) and is converted
when read (:func:`committed_message`).
A group with native members (``/consumers/<group>/ids`` has children) refuses Kafka
joins with INCONSISTENT_GROUP_PROTOCOL: the two rebalance protocols would hand out the
same partitions twice; so does a group with members of the other Kafka protocol (classic
JoinGroup, KIP-848's ConsumerGroupHeartbeat: :mod:`~broker.server.kafka.consumer_group_service`).
A KIP-848 group's offsets are committed here too, its generation being the member epoch;
DescribeGroups and ListGroups show both kinds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.common.acl import group as group_resource
from broker.common.acl import transactional_id as txn_id_resource
from broker.common.errors import AuthorizationError, LogferryError
from broker.coordination import zk
from broker.coordination.registry import ClusterView
from broker.coordination.transactions import pending_for_group
from broker.server.kafka.commits import MESSAGE_UNIT, Commit, committed_message, parse_commit
from broker.server.kafka.consumer_groups import ConsumerGroupCoordinator, classic_assignment, classic_subscription
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.groups import GroupCoordinator, GroupView, MemberView, coordinator_for
from broker.server.kafka.protocol import Api, Request, make, response_schema
from broker.storage.log_manager import LogManager

log = logging.getLogger("logferry.kafka")
_NO_TIME = timedelta(0)


def _offset_path(group: str, topic: str, partition: int, kafka: bool = False) -> str:
    kind = "kafka_offsets" if kafka else "offsets"
    return f"{zk.CONSUMERS}/{group}/{kind}/{topic}/{partition}"


class KafkaGroupService:
    """Answers the group apis; the coordinator of a group is chosen by its id."""

    def __init__(
        self,
        broker_id: int,
        view: Callable[[], ClusterView],
        logs: LogManager,
        zk_client: Callable[[], Any],
        pool: Any,
        authorizer: Any = None,
    ):
        self.broker_id = broker_id
        self.authorizer = authorizer
        """The broker's authorizer (None: allow all): ``consume`` on the group for
        membership and commits (and on each committed topic), ``describe`` on it for
        OffsetFetch, as for native groups (docs/security.md)."""
        self.view = view
        self.logs = logs
        self.zk_client = zk_client
        self.pool = pool
        self.coordinator = GroupCoordinator()
        self.consumer_groups = ConsumerGroupCoordinator()
        """The groups of KIP-848's consumer protocol (ConsumerGroupHeartbeat)."""
        self.txn_coordinator: Callable[[str], Awaitable[int]] | None = None
        """FindCoordinator for a transactional id (the transaction coordinator's
        :meth:`~broker.server.kafka.txn_service.KafkaTxnService.find_coordinator`); None:
        chosen as a group's."""

    def handlers(self) -> dict[Api, Callable[[Request, Any], Coroutine[Any, Any, Any]]]:
        """Api key -> handler, for :class:`~broker.server.kafka.service.KafkaService`."""
        return {
            Api.FIND_COORDINATOR: self.find_coordinator,
            Api.JOIN_GROUP: self.join_group,
            Api.SYNC_GROUP: self.sync_group,
            Api.HEARTBEAT: self.heartbeat,
            Api.LEAVE_GROUP: self.leave_group,
            Api.OFFSET_COMMIT: self.offset_commit,
            Api.OFFSET_FETCH: self.offset_fetch,
            Api.DESCRIBE_GROUPS: self.describe_groups,
            Api.LIST_GROUPS: self.list_groups,
        }

    async def run_expiry(self) -> None:
        """Remove members whose session passed, twice a second, until cancelled."""
        while True:
            await asyncio.sleep(0.5)
            self.coordinator.expire(time.monotonic())
            for group, member in self.consumer_groups.expire(time.monotonic()):
                log.info("Kafka group %s: member %s removed (session or rebalance timeout)", group, member)

    def _denied(self, channel: Any, operation: Operation, group: str, topics: Sequence[str] = ()) -> ErrorCode | None:
        """The Kafka error code when the principal may not do this, else None."""
        if self.authorizer is None:
            return None
        try:
            self.authorizer.check(channel.principal, operation, group_resource(group))
            for topic in topics:
                self.authorizer.check_topic(channel.principal, operation, topic)
        except AuthorizationError as exc:
            return kafka_error(exc)
        return None

    def group_view(self, group_id: str) -> GroupView | None:
        """A group as DescribeGroups shows it, of either protocol (a KIP-848 group as
        protocol type "consumer", its assignor as the protocol, each member's
        subscription and assignment in the classic consumer protocol's bytes, as Kafka's
        tools read them); None when this coordinator holds neither in memory."""
        view = self.coordinator.describe(group_id)
        if view is not None and (view.members or group_id not in self.consumer_groups.groups):
            return view
        group = self.consumer_groups.describe(group_id)
        if group is None:
            return view
        members = [
            MemberView(
                m.member_id,
                m.client_id,
                m.client_host,
                classic_subscription(m.subscribed),
                classic_assignment(m.assigned),
            )
            for m in group.members
        ]
        return GroupView(group.group_id, group.state, "consumer", group.assignor if members else "", members)

    def _coordinator_id(self, group: str) -> int:
        view = self.view()
        return coordinator_for(group, [b for b, i in view.brokers.items() if i.kafka_port])

    def _not_coordinator(self, group: str) -> bool:
        return self._coordinator_id(group) != self.broker_id

    async def _zk(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    # -- FindCoordinator -----------------------------------------------------------------

    async def find_coordinator(self, request: Request, channel: Any) -> Any:
        body = request.body
        schema = response_schema(Api.FIND_COORDINATOR, request.version)
        key_type = getattr(body, "key_type", 0)
        if key_type not in (0, 1):
            return make(
                schema,
                throttle_time=_NO_TIME,
                error_code=ErrorCode.invalid_request,
                error_message=f"FindCoordinator key type {key_type}: only groups (0) and transactions (1)",
                node_id=-1,
                host="",
                port=-1,
            )
        if key_type == 1 and self.authorizer is not None:  # Kafka: DESCRIBE on the TransactionalId
            try:
                self.authorizer.check(channel.principal, Operation.DESCRIBE, txn_id_resource(body.key))
            except AuthorizationError as exc:
                return make(
                    schema,
                    throttle_time=_NO_TIME,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    error_message=str(exc),
                    node_id=-1,
                    host="",
                    port=-1,
                )
        if key_type == 1 and self.txn_coordinator is not None:
            # the leader of the id's partition of __transaction_state (txn_store.py)
            try:
                node = await self.txn_coordinator(body.key)
            except LogferryError as exc:
                log.warning("FindCoordinator for transactional id %r: %s", body.key, exc)
                node = -1
        else:
            node = self._coordinator_id(body.key)
        info = self.view().brokers.get(node)
        if info is None or not info.kafka_port:
            return make(
                schema,
                throttle_time=_NO_TIME,
                error_code=ErrorCode.coordinator_not_available,
                error_message="no live broker speaks Kafka",
                node_id=-1,
                host="",
                port=-1,
            )
        return make(
            schema,
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            error_message=None,
            node_id=node,
            host=info.kafka_host or info.host,
            port=info.kafka_port,
        )

    # -- membership ----------------------------------------------------------------------

    async def join_group(self, request: Request, channel: Any) -> Any:
        body = request.body
        v = request.version
        schema = response_schema(Api.JOIN_GROUP, v)
        member_cls = response_schema(Api.JOIN_GROUP, v, "JoinGroupResponseMember")

        def answer(
            error: ErrorCode,
            generation: int = -1,
            protocol: str | None = None,
            leader: str = "",
            member_id: str = "",
            members: list[tuple[str, bytes]] | None = None,
        ) -> Any:
            return make(
                schema,
                throttle_time=_NO_TIME,
                error_code=error,
                generation_id=generation,
                protocol_type=body.protocol_type,
                protocol_name=protocol if v >= 7 else (protocol or ""),
                leader=leader,
                member_id=member_id,
                members=tuple(
                    make(member_cls, member_id=m, group_instance_id=None, metadata=meta) for m, meta in members or []
                ),
            )

        if self._not_coordinator(body.group_id):
            return answer(ErrorCode.not_coordinator, member_id=body.member_id)
        denied = self._denied(channel, Operation.CONSUME, body.group_id)
        if denied is not None:
            return answer(denied, member_id=body.member_id)
        native = await self._zk(
            lambda: (
                self.zk_client().get_children(f"{zk.CONSUMERS}/{body.group_id}/ids")
                if self.zk_client().exists(f"{zk.CONSUMERS}/{body.group_id}/ids")
                else []
            )
        )
        if native or body.group_id in self.consumer_groups:
            return answer(ErrorCode.inconsistent_group_protocol, member_id=body.member_id)
        self.consumer_groups.forget(body.group_id)  # an empty one becomes a classic group
        session = body.session_timeout.total_seconds()
        rebalance = getattr(body, "rebalance_timeout", None)
        rebalance_s = rebalance.total_seconds() if rebalance is not None else session
        result = await self.coordinator.join(
            body.group_id,
            body.member_id,
            request.client_id or "",
            body.protocol_type,
            [(p.name, p.metadata) for p in body.protocols],
            session,
            rebalance_s,
            require_known_member=v >= 4,
            client_host=channel.peer.rpartition(":")[0],
        )
        return answer(result.error, result.generation, result.protocol, result.leader, result.member_id, result.members)

    async def sync_group(self, request: Request, channel: Any) -> Any:
        body = request.body
        schema = response_schema(Api.SYNC_GROUP, request.version)
        denied = self._denied(channel, Operation.CONSUME, body.group_id)
        if self._not_coordinator(body.group_id):
            error, assignment = ErrorCode.not_coordinator, b""
        elif denied is not None:
            error, assignment = denied, b""
        else:
            error, assignment = await self.coordinator.sync(
                body.group_id, body.generation_id, body.member_id, {a.member_id: a.assignment for a in body.assignments}
            )
        group = self.coordinator.groups.get(body.group_id)
        return make(
            schema,
            throttle_time=_NO_TIME,
            error_code=error,
            protocol_type=group.protocol_type if group else None,
            protocol_name=group.protocol if group else None,
            assignment=assignment,
        )

    async def heartbeat(self, request: Request, channel: Any) -> Any:
        body = request.body
        error = (
            ErrorCode.not_coordinator
            if self._not_coordinator(body.group_id)
            else self._denied(channel, Operation.CONSUME, body.group_id)
            or self.coordinator.heartbeat(body.group_id, body.generation_id, body.member_id)
        )
        return make(response_schema(Api.HEARTBEAT, request.version), throttle_time=_NO_TIME, error_code=error)

    async def leave_group(self, request: Request, channel: Any) -> Any:
        body = request.body
        v = request.version
        ids = [m.member_id for m in body.members] if v >= 3 else [body.member_id]
        member_cls = response_schema(Api.LEAVE_GROUP, v, "MemberResponse") if v >= 3 else None
        results = []
        top = ErrorCode.none
        denied = self._denied(channel, Operation.CONSUME, body.group_id)
        if self._not_coordinator(body.group_id):
            top = ErrorCode.not_coordinator
        elif denied is not None:
            top = denied
        else:
            for member_id in ids:
                results.append((member_id, self.coordinator.leave(body.group_id, member_id)))
            if v < 3 and results:
                top = results[0][1]
        return make(
            response_schema(Api.LEAVE_GROUP, v),
            throttle_time=_NO_TIME,
            error_code=top,
            members=tuple(make(member_cls, member_id=m, group_instance_id=None, error_code=e) for m, e in results)
            if member_cls
            else (),
        )

    # -- offsets -------------------------------------------------------------------------

    async def offset_commit(self, request: Request, channel: Any) -> Any:
        body = request.body
        v = request.version
        part_cls = response_schema(Api.OFFSET_COMMIT, v, "OffsetCommitResponsePartition")
        topic_cls = response_schema(Api.OFFSET_COMMIT, v, "OffsetCommitResponseTopic")
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        if self._not_coordinator(body.group_id):
            error: ErrorCode | None = ErrorCode.not_coordinator
        else:
            error = self._denied(channel, Operation.CONSUME, body.group_id, [t.name for t in body.topics])
            if error is None and body.group_id in self.consumer_groups:  # a live KIP-848 group: members only
                asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
                error = self.consumer_groups.check_commit(body.group_id, body.member_id, generation, asked)
            elif error is None:
                error = self.coordinator.check_commit(body.group_id, generation, body.member_id)
        if error is None:
            offsets = [(t.name, p.partition_index, p.committed_offset) for t in body.topics for p in t.partitions]
            try:
                await self.commit_offsets(body.group_id, offsets)
            except Exception:
                error = ErrorCode.coordinator_not_available
        code = error or ErrorCode.none
        return make(
            response_schema(Api.OFFSET_COMMIT, v),
            throttle_time=_NO_TIME,
            topics=tuple(
                make(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        make(part_cls, partition_index=p.partition_index, error_code=code) for p in t.partitions
                    ),
                )
                for t in body.topics
            ),
        )

    async def commit_offsets(self, group: str, offsets: list[tuple[str, int, int]]) -> None:
        """Write ``(topic, partition, message offset)`` as the group's committed offsets
        (OffsetCommit, and a committed transaction's TxnOffsetCommit); raises what
        ZooKeeper raised."""
        writes: list[tuple[str, bytes]] = []
        now = int(time.time() * 1000)
        for topic, partition, k in offsets:
            writes.append(
                (
                    _offset_path(group, topic, partition, kafka=True),
                    json.dumps({"offset": k, "unit": MESSAGE_UNIT, "time": now}).encode(),
                )
            )
            native = self._native_position(topic, partition, k)
            if native is not None:
                writes.append(
                    (
                        _offset_path(group, topic, partition),
                        json.dumps({"offset": native[0], "skip": native[1], "time": now}).encode(),
                    )
                )
        await self._zk(lambda: _write_all(self.zk_client(), writes))

    def _native_position(self, topic: str, partition: int, k: int) -> tuple[int, int] | None:
        """``(batch byte offset, messages of it to skip)`` for message offset ``k`` from
        this broker's copy of the partition; None without a copy (or ``k`` outside it)."""
        plog = self.logs.get(topic, partition)
        if plog is None:
            return None
        try:
            return plog.batch_for_message(k)
        except LogferryError:
            return None

    async def offset_fetch(self, request: Request, channel: Any) -> Any:
        body = request.body
        v = request.version
        part_cls = response_schema(Api.OFFSET_FETCH, v, "OffsetFetchResponsePartition")
        topic_cls = response_schema(Api.OFFSET_FETCH, v, "OffsetFetchResponseTopic")
        view = self.view()
        if body.topics is None:
            wanted = {t: sorted(view.topics.get(t, {})) for t in view.topics}
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}
        denied = self._denied(channel, Operation.DESCRIBE, body.group_id)
        if self._not_coordinator(body.group_id) or denied is not None:
            return make(
                response_schema(Api.OFFSET_FETCH, v),
                throttle_time=_NO_TIME,
                error_code=denied or ErrorCode.not_coordinator,
                topics=(),
            )
        stored = await self._zk(lambda: _read_all(self.zk_client(), body.group_id, wanted))
        unstable: set[tuple[str, int]] = set()
        if getattr(body, "require_stable", False):  # read_committed consumers ask so
            unstable = await self._zk(lambda: pending_for_group(self.zk_client(), body.group_id))
        positions = {key: self._committed_message(key, commits) for key, commits in stored.items()}
        topics = []
        for topic, parts in wanted.items():
            out = []
            for p in parts:
                offset = positions.get((topic, p), -1)
                if body.topics is None and offset < 0:
                    continue
                out.append(
                    make(
                        part_cls,
                        partition_index=p,
                        committed_offset=-1 if (topic, p) in unstable else offset,
                        committed_leader_epoch=-1,
                        metadata="",
                        # a transaction that commits offsets here has not ended: the
                        # client asks again (Kafka's answer to require_stable)
                        error_code=ErrorCode.unstable_offset_commit if (topic, p) in unstable else ErrorCode.none,
                    )
                )
            if out or body.topics is not None:
                topics.append(make(topic_cls, name=topic, partitions=tuple(out)))
        return make(
            response_schema(Api.OFFSET_FETCH, v),
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            topics=tuple(topics),
        )

    def _committed_message(self, key: tuple[str, int], commits: list[Commit]) -> int:
        """The message offset a group resumes at: the newer of its native and Kafka
        commits that this broker can read in messages (-1: none)."""
        best: tuple[int, int] | None = None  # (time, message offset)
        for commit in commits:
            message = committed_message(commit, self.logs.get(*key))
            if message is not None and (best is None or commit.time >= best[0]):
                best = (commit.time, message)
        return -1 if best is None else best[1]

    # -- DescribeGroups, ListGroups ------------------------------------------------------

    def _committed_groups(self) -> set[str]:
        """Groups with committed offsets in ZooKeeper (native or Kafka)."""
        client = self.zk_client()
        if client.exists(zk.CONSUMERS) is None:
            return set()
        return {
            g
            for g in client.get_children(zk.CONSUMERS)
            if client.exists(f"{zk.CONSUMERS}/{g}/offsets") or client.exists(f"{zk.CONSUMERS}/{g}/kafka_offsets")
        }

    async def describe_groups(self, request: Request, channel: Any) -> Any:
        """Each group's state and members, from this coordinator's memory. A group it
        does not hold in memory is "Empty" when it has committed offsets, else "Dead"
        (Kafka's answer for an unknown group); NOT_COORDINATOR for a group coordinated
        elsewhere."""
        v = request.version
        group_cls = response_schema(Api.DESCRIBE_GROUPS, v, "DescribedGroup")
        member_cls = response_schema(Api.DESCRIBE_GROUPS, v, "DescribedGroupMember")
        committed = await self._zk(self._committed_groups)
        out = []
        for group_id in request.body.groups:
            error = (
                ErrorCode.not_coordinator
                if self._not_coordinator(group_id)
                else self._denied(channel, Operation.DESCRIBE, group_id)
            )
            view = self.group_view(group_id) if error is None else None
            if view is None:
                state = "Empty" if error is None and group_id in committed else "Dead"
                out.append(
                    make(
                        group_cls,
                        error_code=error or ErrorCode.none,
                        group_id=group_id,
                        group_state=state,
                        protocol_type="",
                        protocol_data="",
                        members=(),
                    )
                )
                continue
            out.append(
                make(
                    group_cls,
                    error_code=ErrorCode.none,
                    group_id=group_id,
                    group_state=view.state,
                    protocol_type=view.protocol_type,
                    protocol_data=view.protocol,
                    members=tuple(
                        make(
                            member_cls,
                            member_id=m.member_id,
                            group_instance_id=None,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in view.members
                    ),
                )
            )
        return make(response_schema(Api.DESCRIBE_GROUPS, v), throttle_time=_NO_TIME, groups=tuple(out))

    async def list_groups(self, request: Request, channel: Any) -> Any:
        """The groups this broker coordinates (admin clients ask every broker): those
        in memory with their state, and those with only committed offsets in ZooKeeper
        as "Empty" (protocol type "consumer" for Kafka commits, "" for native ones).
        From v5 each has its type, "consumer" for a KIP-848 group and "classic" for the
        others, and the types asked for filter them. Groups the principal may not
        describe are left out, as Kafka does."""
        v = request.version
        listed_cls = response_schema(Api.LIST_GROUPS, v, "ListedGroup")
        committed = await self._zk(self._committed_groups)
        known = {g.group_id: g for g in self.coordinator.listing()}
        for group_id in self.consumer_groups.groups:
            view = self.group_view(group_id)
            if view is not None and (view.members or group_id not in known):
                known[group_id] = view
        kafka_commits = await self._zk(
            lambda: {g for g in committed if self.zk_client().exists(f"{zk.CONSUMERS}/{g}/kafka_offsets")}
        )
        wanted = {s.lower() for s in getattr(request.body, "states_filter", ()) or ()}
        types = {s.lower() for s in getattr(request.body, "types_filter", ()) or ()}
        out = []
        for group_id in sorted(set(known) | committed):
            if self._not_coordinator(group_id) or self._denied(channel, Operation.DESCRIBE, group_id) is not None:
                continue
            view = known.get(group_id)
            state = view.state if view else "Empty"
            protocol_type = view.protocol_type if view else "consumer" if group_id in kafka_commits else ""
            group_type = "consumer" if group_id in self.consumer_groups.groups else "classic"
            if (wanted and state.lower() not in wanted) or (types and group_type not in types):
                continue
            out.append(
                make(
                    listed_cls, group_id=group_id, protocol_type=protocol_type, group_state=state, group_type=group_type
                )
            )
        return make(
            response_schema(Api.LIST_GROUPS, v), throttle_time=_NO_TIME, error_code=ErrorCode.none, groups=tuple(out)
        )


def _write_all(client: Any, writes: list[tuple[str, bytes]]) -> None:
    for path, data in writes:
        if client.exists(path) is None:
            try:
                client.create(path, data, makepath=True)
                continue
            except zk.NodeExistsError:
                pass
        client.set(path, data)


def _read_all(client: Any, group: str, wanted: dict[str, list[int]]) -> dict[tuple[str, int], list[Commit]]:
    """The commits (native and Kafka) of each wanted partition that has any."""
    out: dict[tuple[str, int], list[Commit]] = {}
    for topic, parts in wanted.items():
        for p in parts:
            found = []
            for kafka in (False, True):
                try:
                    raw, _ = client.get(_offset_path(group, topic, p, kafka))
                    found.append(parse_commit(json.loads(raw), kafka))
                except Exception:  # absent or unreadable: no commit of that kind
                    continue
            if found:
                out[(topic, p)] = found
    return out


__all__ = ["KafkaGroupService"]
