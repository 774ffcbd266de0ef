"""Kafka's DeleteGroups and OffsetDelete (kafka-python's admin client) on a group with a
native member: the member's group and topic are refused, what it does not use goes,
and the same ZooKeeper nodes as ``logferry group delete`` are removed
(broker/server/kafka/group_deletion.py, broker/coordination/group_nodes.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError, NonEmptyGroupError
from kazoo.client import KazooClient

from broker.client import GroupConsumer
from broker.client.group.offsets import Committed, read_members, read_offsets, write_offsets
from tests.support.brokers import KAFKA_LISTENER, KafkaCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The module's shared broker speaks Kafka too."""
    return {"kafka": KAFKA_LISTENER}


@pytest.fixture
def admin(module_kafka_cluster: KafkaCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=module_kafka_cluster.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


@pytest.fixture
def zk(module_kafka_cluster: KafkaCluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=module_kafka_cluster.zk_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_a_native_members_group_and_topic_are_kept_and_the_rest_deleted(
    module_kafka_cluster: KafkaCluster, admin: KafkaAdminClient, zk: KazooClient, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    used, unused, group = unique_name("used"), unique_name("unused"), unique_name("g")
    cluster.create_topic(used, 1)
    cluster.create_topic(unused, 1)
    write_offsets(zk, group, {(used, 0): Committed.now(0), (unused, 0): Committed.now(0)})
    member = GroupConsumer(group, topics=[used], zk=cluster.zk_connect)
    try:
        wait_until(lambda: read_members(zk, group), 20, "the native member registered")
        assert admin.delete_groups([group]) == {group: NonEmptyGroupError.__name__}
        answer = admin.delete_group_offsets(group, [KpTopicPartition(used, 0), KpTopicPartition(unused, 0)])
        assert answer == {KpTopicPartition(used, 0): GroupSubscribedToTopicError, KpTopicPartition(unused, 0): NoError}
        assert sorted(read_offsets(zk, group)) == [(used, 0)]
    finally:
        member.close()
    wait_until(lambda: not read_members(zk, group), 20, "the native member gone")
    assert admin.delete_groups([group]) == {group: "OK"}
    assert zk.exists(f"/consumers/{group}") is None
    assert admin.delete_groups([group]) == {group: GroupIdNotFoundError.__name__}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets(group, [KpTopicPartition(used, 0)])
