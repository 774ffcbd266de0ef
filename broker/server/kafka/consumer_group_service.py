"""ConsumerGroupHeartbeat (api 68, KIP-848's consumer group protocol) and
ConsumerGroupDescribe (69), v0 and v1.

The state machine is :class:`~broker.server.kafka.consumer_groups.ConsumerGroupCoordinator`
(the group service's ``consumer_groups``); this module turns requests into its calls:
topics by id (the ids Metadata serves: :func:`~broker.server.kafka.protocol.topic_uuid`
of the cluster view's), partition counts from the cluster view, the clock. The
coordinator, the ACLs (``consume`` on the group and on each subscribed topic) and the
refusals of a group that has members of another protocol are the classic handlers'
(:mod:`~broker.server.kafka.group_service`). Regex subscriptions are not served
(INVALID_REQUEST, saying so); ``instance_id`` (static membership) is ignored: such a
member is a dynamic one, and epoch -2 leaves as -1 does. ConsumerGroupDescribe answers
GROUP_ID_NOT_FOUND for a classic group (or one known only by its commits), as Kafka does:
Kafka's admin client then asks DescribeGroups.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.coordination import zk
from broker.server.kafka.consumer_groups import ConsumerMemberView, HeartbeatResult, TopicPartition
from broker.server.kafka.group_service import KafkaGroupService
from broker.server.kafka.protocol import Api, Request, make, response_schema, topic_uuid

log = logging.getLogger("logferry.kafka")
_NO_TIME = timedelta(0)


class KafkaConsumerGroups:
    """Answers ConsumerGroupHeartbeat for the groups this broker coordinates."""

    def __init__(self, groups: KafkaGroupService):
        self.groups = groups
        self.coordinator = groups.consumer_groups

    def handlers(self) -> dict[Api, Callable[[Request, Any], Coroutine[Any, Any, Any]]]:
        """Api key -> handler, for :class:`~broker.server.kafka.service.KafkaService`."""
        return {Api.CONSUMER_GROUP_HEARTBEAT: self.heartbeat, Api.CONSUMER_GROUP_DESCRIBE: self.describe}

    async def heartbeat(self, request: Request, channel: Any) -> Any:
        body = request.body
        v = request.version
        member_id = body.member_id
        if v == 0 and not member_id and body.member_epoch == 0:
            member_id = str(uuid.uuid4())  # v0: the coordinator names a new member
        result = await self._heartbeat(body, member_id, request.client_id or "", channel)
        if result.error != ErrorCode.none and result.error not in (
            ErrorCode.fenced_member_epoch,
            ErrorCode.unknown_member_id,
            ErrorCode.not_coordinator,
        ):
            log.info(
                "ConsumerGroupHeartbeat of %s in %s: %s %s", member_id, body.group_id, result.error.name, result.message
            )
        return self._answer(v, result)

    async def _heartbeat(self, body: Any, member_id: str, client_id: str, channel: Any) -> HeartbeatResult:
        group_id = body.group_id
        if self.groups._not_coordinator(group_id):
            return HeartbeatResult(ErrorCode.not_coordinator, f"this broker is not {group_id}'s coordinator", member_id)
        topics = list(body.subscribed_topic_names or ())
        denied = self.groups._denied(channel, Operation.CONSUME, group_id, topics)
        if denied is not None:
            return HeartbeatResult(denied, f"not authorized for group {group_id} or its topics", member_id)
        if getattr(body, "subscribed_topic_regex", None):
            return HeartbeatResult(
                ErrorCode.invalid_request,
                "regex subscriptions are not served by logferry's consumer protocol: subscribe to topic names",
                member_id,
            )
        if body.member_epoch == 0:
            try:
                refusal = await self._other_protocol(group_id)
            except Exception:  # ZooKeeper unreachable: a retriable answer, not a closed connection
                return HeartbeatResult(ErrorCode.coordinator_not_available, "ZooKeeper is unreachable", member_id)
            if refusal is not None:
                return HeartbeatResult(ErrorCode.group_id_not_found, refusal, member_id)
        view = self.groups.view()
        partitions = {t: len(parts) for t, parts in view.topics.items()}
        by_id = {topic_uuid(view.topic_ids.get(t, 0)): t for t in view.topics}
        owned: list[TopicPartition] | None = None
        if body.topic_partitions is not None:
            owned = [
                (by_id[tp.topic_id], p) for tp in body.topic_partitions if tp.topic_id in by_id for p in tp.partitions
            ]
        rebalance = body.rebalance_timeout.total_seconds()
        return self.coordinator.heartbeat(
            group_id,
            member_id,
            -1 if body.member_epoch == -2 else body.member_epoch,
            time.monotonic(),
            partitions,
            subscribed=body.subscribed_topic_names,
            owned=owned,
            rebalance_s=rebalance if rebalance > 0 else None,
            assignor=body.server_assignor,
            client_id=client_id,
            client_host=channel.peer.rpartition(":")[0],
        )

    async def _other_protocol(self, group_id: str) -> str | None:
        """Why a member may not join ``group_id``: it has classic or native members."""
        classic = self.groups.coordinator.describe(group_id)
        if classic is not None and classic.members:
            return f"group {group_id} has members of the classic protocol"
        client = self.groups.zk_client
        ids = f"{zk.CONSUMERS}/{group_id}/ids"
        native = await self.groups._zk(lambda: client().exists(ids) is not None and bool(client().get_children(ids)))
        return f"group {group_id} has members of logferry's native protocol" if native else None

    def _answer(self, v: int, result: HeartbeatResult) -> Any:
        assignment = None
        if result.assignment is not None:
            view = self.groups.view()
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(result.assignment):
                by_topic.setdefault(topic, []).append(p)
            tp_cls = response_schema(Api.CONSUMER_GROUP_HEARTBEAT, v, "TopicPartitions")
            assignment = make(
                response_schema(Api.CONSUMER_GROUP_HEARTBEAT, v, "Assignment"),
                topic_partitions=tuple(
                    make(tp_cls, topic_id=topic_uuid(view.topic_ids.get(t, 0)), partitions=tuple(parts))
                    for t, parts in by_topic.items()
                ),
            )
        return make(
            response_schema(Api.CONSUMER_GROUP_HEARTBEAT, v),
            throttle_time=_NO_TIME,
            error_code=result.error,
            error_message=result.message,
            member_id=result.member_id or None,
            member_epoch=result.member_epoch,
            heartbeat_interval=timedelta(seconds=result.heartbeat_interval_s),
            assignment=assignment,
        )

    async def describe(self, request: Request, channel: Any) -> Any:
        """Each group's epochs, assignor and members with their current and target
        assignments."""
        v = request.version
        group_cls = response_schema(Api.CONSUMER_GROUP_DESCRIBE, v, "DescribedGroup")
        out = []
        for group_id in request.body.group_ids:
            message = None
            view = None
            if self.groups._not_coordinator(group_id):
                error: ErrorCode | None = ErrorCode.not_coordinator
            else:
                error = self.groups._denied(channel, Operation.DESCRIBE, group_id)
            if error is None:
                classic = self.groups.coordinator.describe(group_id)
                view = self.coordinator.describe(group_id)
                if view is None or (classic is not None and classic.members):
                    error, message, view = (
                        ErrorCode.group_id_not_found,
                        f"group {group_id} is not a consumer group",
                        None,
                    )
            if view is None:
                out.append(
                    make(
                        group_cls,
                        error_code=error,
                        error_message=message,
                        group_id=group_id,
                        group_state="Dead",
                        group_epoch=-1,
                        assignment_epoch=-1,
                        assignor_name="",
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
                    group_epoch=view.group_epoch,
                    assignment_epoch=view.assignment_epoch,
                    assignor_name=view.assignor,
                    members=tuple(self._member(v, m) for m in view.members),
                )
            )
        return make(response_schema(Api.CONSUMER_GROUP_DESCRIBE, v), throttle_time=_NO_TIME, groups=tuple(out))

    def _member(self, v: int, member: ConsumerMemberView) -> Any:
        ids = self.groups.view().topic_ids
        tp_cls = response_schema(Api.CONSUMER_GROUP_DESCRIBE, v, "TopicPartitions")
        assignment_cls = response_schema(Api.CONSUMER_GROUP_DESCRIBE, v, "Assignment")

        def assignment(partitions: list[TopicPartition]) -> Any:
            by_topic: dict[str, list[int]] = {}
            for topic, p in partitions:
                by_topic.setdefault(topic, []).append(p)
            return make(
                assignment_cls,
                topic_partitions=tuple(
                    make(tp_cls, topic_id=topic_uuid(ids.get(t, 0)), topic_name=t, partitions=tuple(parts))
                    for t, parts in by_topic.items()
                ),
            )

        return make(
            response_schema(Api.CONSUMER_GROUP_DESCRIBE, v, "Member"),
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=member.subscribed,
            assignment=assignment(member.assigned),
            target_assignment=assignment(member.target),
            member_type=1,
        )


__all__ = ["KafkaConsumerGroups"]
