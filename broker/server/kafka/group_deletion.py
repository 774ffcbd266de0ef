"""DeleteGroups (Kafka api 42, v0-v2) and OffsetDelete (47, v0): deleting a group's
committed offsets from Kafka's admin clients and tools.

``Admin.deleteConsumerGroups``, ``kafka-consumer-groups --delete``, confluent-kafka's
``delete_consumer_groups``; ``Admin.deleteConsumerGroupOffsets`` and
``kafka-consumer-groups --delete-offsets``. Native and Kafka groups keep their offsets
in the same ZooKeeper nodes, so both apis delete through
:mod:`broker.coordination.group_nodes`, the code ``logferry group delete`` runs.

As Kafka answers, on the group's coordinator (NOT_COORDINATOR elsewhere):

* DeleteGroups, per group: a group with members, Kafka ones in this coordinator's
  memory or native ones registered in ZooKeeper, gets NON_EMPTY_GROUP; a group unknown
  to both GROUP_ID_NOT_FOUND; otherwise every znode of the group goes (its commits of
  both kinds) and the coordinator forgets it.
* OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group; NON_EMPTY_GROUP for a group
  with live Kafka members of another protocol than ``consumer`` (Kafka Connect's, say:
  their topics cannot be told); per partition, GROUP_SUBSCRIBED_TO_TOPIC while a live
  member is subscribed to its topic (a Kafka consumer's subscription from its join
  metadata, a native member's from its registration), else its commits of both kinds
  are deleted.

Authorization: ``delete`` on the group (GROUP_AUTHORIZATION_FAILED), and for
OffsetDelete ``consume`` on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions),
as Kafka asks DELETE on the group and READ on the topics.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.common.errors import AuthorizationError
from broker.coordination.group_nodes import delete_group, delete_offsets, group_path
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.group_service import KafkaGroupService
from broker.server.kafka.protocol import Api, Request, make, response_schema

_NO_TIME = timedelta(0)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a Kafka consumer's join metadata (ConsumerProtocolSubscription,
    any version: version i16, then the topics as an i32 count of i16-length strings);
    None when it cannot be read (the caller then takes every topic as subscribed)."""
    try:
        (count,) = _I32.unpack_from(metadata, 2)
        pos, topics = 6, set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            if length < 0 or pos + 2 + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos + 2 : pos + 2 + length]).decode())
            pos += 2 + length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class KafkaGroupDeletion:
    """Answers DeleteGroups and OffsetDelete for the groups ``groups`` coordinates."""

    def __init__(self, groups: KafkaGroupService):
        self.groups = groups

    def handlers(self) -> dict[Api, Callable[[Request, Any], Coroutine[Any, Any, Any]]]:
        """Api key -> handler, for :class:`~broker.server.kafka.service.KafkaService`."""
        return {Api.DELETE_GROUPS: self.delete_groups, Api.OFFSET_DELETE: self.offset_delete}

    def _refusal(self, channel: Any, group: str) -> ErrorCode | None:
        """NOT_COORDINATOR or GROUP_AUTHORIZATION_FAILED, else None."""
        if self.groups._not_coordinator(group):
            return ErrorCode.not_coordinator
        return self.groups._denied(channel, Operation.DELETE, group)

    def _has_kafka_members(self, group: str) -> bool:
        view = self.groups.group_view(group)
        return view is not None and bool(view.members)

    # -- DeleteGroups ------------------------------------------------------------------

    async def delete_groups(self, request: Request, channel: Any) -> Any:
        """One result per group: deleted, or why not."""
        v = request.version
        result_cls = response_schema(Api.DELETE_GROUPS, v, "DeletableGroupResult")
        results = []
        for group in request.body.groups_names:
            error = self._refusal(channel, group)
            if error is None:
                error = await self._delete_group(group)
            results.append(make(result_cls, group_id=group, error_code=error))
        return make(response_schema(Api.DELETE_GROUPS, v), throttle_time=_NO_TIME, results=tuple(results))

    async def _delete_group(self, group: str) -> ErrorCode:
        if self._has_kafka_members(group):
            return ErrorCode.non_empty_group
        in_memory = self.groups.coordinator.groups.pop(group, None) is not None
        in_memory = self.groups.consumer_groups.forget(group) or in_memory
        client = self.groups.zk_client

        def delete() -> ErrorCode:
            zk = client()
            if _native_members(zk, group):
                return ErrorCode.non_empty_group
            existed = delete_group(zk, group)
            return ErrorCode.none if existed or in_memory else ErrorCode.group_id_not_found

        try:
            result: ErrorCode = await self.groups._zk(delete)
        except Exception:  # ZooKeeper unreachable: retriable, as Kafka's log unavailable
            return ErrorCode.coordinator_not_available
        return result

    # -- OffsetDelete ------------------------------------------------------------------

    async def offset_delete(self, request: Request, channel: Any) -> Any:
        """Delete the group's commits of the partitions asked for, but of none whose
        topic a live member is subscribed to."""
        body = request.body
        group = body.group_id
        part_cls = response_schema(Api.OFFSET_DELETE, 0, "OffsetDeleteResponsePartition")
        topic_cls = response_schema(Api.OFFSET_DELETE, 0, "OffsetDeleteResponseTopic")

        def answer(error: ErrorCode, codes: dict[tuple[str, int], ErrorCode] | None = None) -> Any:
            topics = ()
            if codes is not None:
                topics = tuple(
                    make(
                        topic_cls,
                        name=t.name,
                        partitions=tuple(
                            make(
                                part_cls,
                                partition_index=p.partition_index,
                                error_code=codes[(t.name, p.partition_index)],
                            )
                            for p in t.partitions
                        ),
                    )
                    for t in body.topics
                )
            return make(response_schema(Api.OFFSET_DELETE, 0), error_code=error, throttle_time=_NO_TIME, topics=topics)

        refused = self._refusal(channel, group)
        if refused is not None:
            return answer(refused)
        kafka_view = self.groups.group_view(group)
        if kafka_view is not None and kafka_view.members and kafka_view.protocol_type != "consumer":
            return answer(ErrorCode.non_empty_group)  # its members' topics cannot be told
        subscribed: set[str] | None = set()
        if kafka_view is not None:
            for member in kafka_view.members:
                topics = subscribed_topics(member.metadata)
                subscribed = None if topics is None or subscribed is None else subscribed | topics
        codes: dict[tuple[str, int], ErrorCode] = {}
        asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
        authorizer = self.groups.authorizer
        for topic, partition in asked if authorizer is not None else ():
            try:
                authorizer.check_topic(channel.principal, Operation.CONSUME, topic)
            except AuthorizationError as exc:
                codes[(topic, partition)] = kafka_error(exc)
        client = self.groups.zk_client

        def delete() -> ErrorCode:
            zk = client()
            if kafka_view is None and zk.exists(group_path(group)) is None:
                return ErrorCode.group_id_not_found
            natives = _native_members(zk, group)
            doomed = []
            for key in asked:
                if key in codes:
                    continue
                if subscribed is None or key[0] in subscribed or any(_subscribes(m, key[0]) for m in natives):
                    codes[key] = ErrorCode.group_subscribed_to_topic
                else:
                    codes[key] = ErrorCode.none
                    doomed.append(key)
            delete_offsets(zk, group, doomed)
            return ErrorCode.none

        try:
            error: ErrorCode = await self.groups._zk(delete)
        except Exception:  # ZooKeeper unreachable: retriable
            return answer(ErrorCode.coordinator_not_available)
        return answer(error, codes) if error == ErrorCode.none else answer(error)


def _native_members(zk: Any, group: str) -> list[dict[str, Any]]:
    """The registrations of the group's live native members (their JSON data)."""
    try:
        children = zk.get_children(f"{group_path(group)}/ids")
    except NoNodeError:
        return []
    out = []
    for child in children:
        try:
            raw, _ = zk.get(f"{group_path(group)}/ids/{child}")
        except NoNodeError:
            continue
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        out.append(data if isinstance(data, dict) else {})
    return out


def _subscribes(member: dict[str, Any], topic: str) -> bool:
    """Whether a native member's registration covers ``topic`` (an unreadable one is
    taken to: deleting offsets a live member uses would rewind it)."""
    subscription = member.get("subscription")
    if isinstance(subscription, dict) and topic in subscription:
        return True
    pattern = member.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            return re.fullmatch(pattern, topic) is not None
        except re.error:
            return True
    return not isinstance(subscription, dict)


__all__ = ["KafkaGroupDeletion", "subscribed_topics"]
