"""Which log serves a partition request here, or the error that says where to go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.common.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderError,
    UnknownTopicOrPartitionError,
)
from broker.common.names import validate_topic_name
from broker.coordination.registry import ClusterView
from broker.storage.partition_log import PartitionLog


class PartitionRouter:
    """Finds the log of a partition this broker leads (``view``: the current
    :class:`ClusterView`, read on each call since the registry replaces it)."""

    def __init__(self, broker_id: int, replication: Any, view: Callable[[], ClusterView]):
        self.broker_id = broker_id
        self.replication = replication
        self.view = view

    def leader_log(self, topic: Any, partition: Any, for_write: bool = False, acks_all: bool = False) -> PartitionLog:
        """The log of a partition this broker leads, or the error to answer with
        (``acks_all``: the write is answered only once every in-sync replica has it,
        which a leader may take while ZooKeeper is away: broker.replication.leader)."""
        if type(topic) is not str or type(partition) is not int:
            raise InvalidRequestError("topic must be a string and partition an integer")
        plog: PartitionLog | None = self.replication.leader_log(topic, partition, for_write, acks_all)
        if plog is not None:
            return plog
        validate_topic_name(topic)
        view = self.view()
        assignment = view.topics.get(topic)
        if assignment is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        if partition not in assignment:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0-{len(assignment) - 1}, not {partition}"
            )
        leader = view.leader(topic, partition)
        if leader < 0:
            raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader right now")
        raise NotLeaderError(f"partition {topic}-{partition} is led by broker {leader}, not broker {self.broker_id}")


__all__ = ["PartitionRouter"]
