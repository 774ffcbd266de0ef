"""ConsumerGroupHeartbeat (api 68) and the KIP-848 side of OffsetCommit, through the
handlers (broker/server/kafka/consumer_group_service.py, group_service.py) with a fake
cluster view, ZooKeeper and authorizer: no sockets."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.common.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from broker.coordination.registry import BrokerInfo, ClusterView
from broker.server.kafka.consumer_group_service import KafkaConsumerGroups
from broker.server.kafka.group_service import KafkaGroupService
from broker.server.kafka.groups import coordinator_for
from broker.server.kafka.protocol import SUPPORTED, Api, Request, make, topic_uuid

VIEW = ClusterView(
    brokers={1: BrokerInfo("127.0.0.1", 9000, kafka_port=9092), 2: BrokerInfo("127.0.0.1", 9001, kafka_port=9093)},
    topics={"t": {0: [1], 1: [1], 2: [1]}, "secret": {0: [1]}},
    topic_ids={"t": 77, "secret": 78},
)
T = topic_uuid(77)


def group_on(broker: int, prefix: str = "g") -> str:
    """A group id broker ``broker`` coordinates."""
    return next(g for g in (f"{prefix}{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == broker)


G = group_on(1)


class FakeZk:
    def exists(self, path: str) -> Any:
        return None

    def get_children(self, path: str) -> list[str]:
        return []


class Denying:
    """Denies the group "forbidden" and the topic "secret"."""

    def check(self, principal: Any, operation: Any, resource: Any) -> None:
        if "forbidden" in str(resource):
            raise GroupAuthorizationFailedError("no")

    def check_topic(self, principal: Any, operation: Any, name: str) -> None:
        if name == "secret":
            raise TopicAuthorizationFailedError("no")


class Channel:
    peer = "127.0.0.1:5555"
    principal = None


def service() -> tuple[KafkaGroupService, KafkaConsumerGroups]:
    groups = KafkaGroupService(1, lambda: VIEW, None, FakeZk, None, Denying())  # type: ignore[arg-type]
    return groups, KafkaConsumerGroups(groups)


def heartbeat(api: KafkaConsumerGroups, version: int = 1, **fields: Any) -> Any:
    schema = load_request_schema(Api.CONSUMER_GROUP_HEARTBEAT, version)
    values = {"group_id": G, "member_id": "m1", "member_epoch": 0, "topic_partitions": None, **fields}
    request = Request(Api.CONSUMER_GROUP_HEARTBEAT, version, 1, "client", make(schema, **values))
    return asyncio.run(api.heartbeat(request, Channel()))


def owned(*parts: int) -> tuple[Any, ...]:
    schema = load_request_schema(Api.CONSUMER_GROUP_HEARTBEAT, 1)
    cls = __import__(schema.__module__, fromlist=["TopicPartitions"]).TopicPartitions
    return (cls(topic_id=T, partitions=parts),)


def test_advertised_in_api_versions() -> None:
    assert SUPPORTED[Api.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert SUPPORTED[Api.OFFSET_COMMIT] == (2, 9)


@pytest.mark.parametrize("version", [0, 1])
def test_a_join_gets_every_partition_by_topic_id(version: int) -> None:
    _, api = service()
    answer = heartbeat(api, version, subscribed_topic_names=("t",), topic_partitions=())
    assert answer.error_code == ErrorCode.none
    assert answer.member_epoch == 1 and answer.member_id == "m1"
    assert answer.heartbeat_interval.total_seconds() == 1.0
    [assigned] = answer.assignment.topic_partitions
    assert (assigned.topic_id, assigned.partitions) == (T, (0, 1, 2))


def test_v0_names_a_member_without_an_id() -> None:
    _, api = service()
    answer = heartbeat(api, 0, member_id="", subscribed_topic_names=("t",), topic_partitions=())
    assert answer.error_code == ErrorCode.none and uuid.UUID(answer.member_id)


def test_refusals() -> None:
    _, api = service()
    assert heartbeat(api, group_id=group_on(2), subscribed_topic_names=("t",)).error_code == ErrorCode.not_coordinator
    forbidden = heartbeat(api, group_id=group_on(1, "forbidden"), subscribed_topic_names=("t",))
    assert forbidden.error_code == ErrorCode.group_authorization_failed
    secret = heartbeat(api, subscribed_topic_names=("t", "secret"))
    assert secret.error_code == ErrorCode.topic_authorization_failed
    regex = heartbeat(api, subscribed_topic_regex="t.*", topic_partitions=())
    assert regex.error_code == ErrorCode.invalid_request and "regex" in regex.error_message
    assert heartbeat(api, member_epoch=3).error_code == ErrorCode.unknown_member_id


def test_reconciliation_through_the_api_and_a_leave() -> None:
    _, api = service()
    heartbeat(api, subscribed_topic_names=("t",), topic_partitions=())
    second = heartbeat(api, member_id="m2", subscribed_topic_names=("t",), topic_partitions=())
    assert second.member_epoch == 2 and second.assignment.topic_partitions == ()
    told = heartbeat(api, member_epoch=1, topic_partitions=owned(0, 1, 2))  # m1 must give some up
    keep = told.assignment.topic_partitions[0].partitions
    assert told.member_epoch == 1 and len(keep) == 2
    assert heartbeat(api, member_id="m2", member_epoch=2).assignment is None  # not yet released
    assert heartbeat(api, member_epoch=1, topic_partitions=owned(*keep)).member_epoch == 2
    got = heartbeat(api, member_id="m2", member_epoch=2)
    assert set(got.assignment.topic_partitions[0].partitions) == {0, 1, 2} - set(keep)
    assert heartbeat(api, member_epoch=7).error_code == ErrorCode.fenced_member_epoch
    left = heartbeat(api, member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)


def commit(groups: KafkaGroupService, member: str, epoch: int) -> ErrorCode:
    schema = load_request_schema(Api.OFFSET_COMMIT, 9)
    module = __import__(schema.__module__, fromlist=["OffsetCommitRequestTopic"])
    topic = module.OffsetCommitRequestTopic(
        name="t",
        partitions=(
            module.OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_metadata=None),
        ),
    )
    body = schema(group_id=G, generation_id_or_member_epoch=epoch, member_id=member, topics=(topic,))
    written: list[Any] = []

    async def fake_commit(group: str, offsets: list[Any]) -> None:
        written.append(offsets)

    groups.commit_offsets = fake_commit  # type: ignore[method-assign]
    answer = asyncio.run(groups.offset_commit(Request(Api.OFFSET_COMMIT, 9, 1, "c", body), Channel()))
    code: ErrorCode = answer.topics[0].partitions[0].error_code
    assert bool(written) == (code == ErrorCode.none)
    return code


def test_offset_commit_checks_the_member_epoch() -> None:
    groups, api = service()
    heartbeat(api, subscribed_topic_names=("t",), topic_partitions=())
    assert commit(groups, "m1", 1) == ErrorCode.none
    assert commit(groups, "m1", 2) == ErrorCode.stale_member_epoch
    assert commit(groups, "nobody", 1) == ErrorCode.unknown_member_id
    assert commit(groups, "", -1) == ErrorCode.unknown_member_id  # not while it has members, as Kafka
    heartbeat(api, member_epoch=-1)
    assert commit(groups, "", -1) == ErrorCode.none  # an admin's commit into the empty group


def test_describe_shows_a_consumer_group_in_classic_bytes() -> None:
    groups, api = service()
    heartbeat(api, subscribed_topic_names=("t",), topic_partitions=())
    view = groups.group_view(G)
    assert view is not None
    assert (view.protocol_type, view.protocol, view.state) == ("consumer", "uniform", "Stable")
    [member] = view.members
    assert member.member_id == "m1" and member.client_id == "client" and member.client_host == "127.0.0.1"


def describe(api: KafkaConsumerGroups, *groups: str) -> Any:
    schema = load_request_schema(Api.CONSUMER_GROUP_DESCRIBE, 1)
    body = schema(group_ids=groups, include_authorized_operations=False)
    return asyncio.run(api.describe(Request(Api.CONSUMER_GROUP_DESCRIBE, 1, 1, "c", body), Channel()))


def test_consumer_group_describe() -> None:
    groups, api = service()
    assert SUPPORTED[Api.CONSUMER_GROUP_DESCRIBE] == (0, 1)
    heartbeat(api, subscribed_topic_names=("t",), topic_partitions=())
    heartbeat(api, member_id="m2", subscribed_topic_names=("t",), topic_partitions=())
    unknown, other, forbidden = group_on(1, "u"), group_on(2), group_on(1, "forbidden")
    answer = describe(api, G, unknown, other, forbidden)
    mine, missing, elsewhere, denied = answer.groups
    assert (mine.error_code, mine.group_state, mine.group_epoch, mine.assignment_epoch) == (
        ErrorCode.none,
        "Reconciling",
        2,
        2,
    )
    assert mine.assignor_name == "uniform"
    by_id = {m.member_id: m for m in mine.members}
    m1, m2 = by_id["m1"], by_id["m2"]
    assert m1.assignment.topic_partitions[0].partitions == (0, 1, 2)  # still m1's: not yet revoked
    assert m2.assignment.topic_partitions == ()
    targets = [m.target_assignment.topic_partitions[0] for m in (m1, m2)]
    assert sorted(targets[0].partitions + targets[1].partitions) == [0, 1, 2]
    assert {t.topic_name for t in targets} == {"t"} and {t.topic_id for t in targets} == {T}
    assert (m1.member_epoch, m1.client_id, m1.subscribed_topic_names, m1.member_type) == (1, "client", ("t",), 1)
    assert missing.error_code == ErrorCode.group_id_not_found  # the admin client then asks DescribeGroups
    assert elsewhere.error_code == ErrorCode.not_coordinator
    assert denied.error_code == ErrorCode.group_authorization_failed
