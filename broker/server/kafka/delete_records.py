"""DeleteRecords (Kafka api 21, v0-v2): start a partition's log at a message offset.

``Admin.deleteRecords``, ``kafka-delete-records`` and confluent-kafka's
``delete_records`` come here. The leader of each partition moves its log start to the
message asked for (-1: the high watermark) with
:meth:`~broker.storage.partition_log.PartitionLog.delete_records_before`: the segments
wholly below it are deleted and what remains below it in the first segment is hidden
from fetches, ListOffsets and the native protocol alike (one log start for both), as
Kafka's ``logStartOffset`` hides it. The start is recorded on disk before anything goes
and the leader tells its followers in every replica fetch answer, so it holds after a
restart and a leader change (docs/kafka.md, "Deleting records, groups and offsets").

Per partition, as Kafka answers: the new low watermark (the log start, in message
offsets); OFFSET_OUT_OF_RANGE for an offset past the high watermark (or below -1);
NOT_LEADER_OR_FOLLOWER on a broker that does not lead it; an offset at or below the
start changes nothing and answers the start; a topic whose ``cleanup.policy`` is
``compact`` POLICY_VIOLATION. Unlike Kafka, the answer does not wait for
the followers: each moves its start at its next fetch. Authorization: ``delete`` on
the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.common.errors import LogferryError, OffsetOutOfRangeError
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.offsets import Positions
from broker.server.kafka.protocol import Api, Request, make, response_schema
from broker.server.security.authorizer import Authorizer
from broker.storage.partition_log import PartitionLog

HIGH_WATERMARK = -1
"""The offset that means "up to the high watermark" (Kafka's)."""


class KafkaDeleteRecords:
    """Answers DeleteRecords on the partitions this broker leads."""

    def __init__(self, leader_log: Callable[[str, int], PartitionLog], positions: Positions, authorizer: Authorizer):
        self.leader_log = leader_log
        self.positions = positions
        self.authorizer = authorizer

    async def delete_records(self, request: Request, channel: Any) -> Any:
        """One result per partition asked: its new low watermark, or the error that left
        it as it was."""
        v = request.version
        part_cls = response_schema(Api.DELETE_RECORDS, v, "DeleteRecordsPartitionResult")
        topic_cls = response_schema(Api.DELETE_RECORDS, v, "DeleteRecordsTopicResult")
        topics = []
        for topic in request.body.topics:
            parts = []
            for part in topic.partitions:
                try:
                    error, low = self._delete(channel, topic.name, part.partition_index, part.offset)
                except LogferryError as exc:
                    error, low = kafka_error(exc), -1
                parts.append(make(part_cls, partition_index=part.partition_index, low_watermark=low, error_code=error))
            topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
        return make(response_schema(Api.DELETE_RECORDS, v), throttle_time=timedelta(0), topics=tuple(topics))

    def _delete(self, channel: Any, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
        """(none, the partition's log start after deleting the records before
        ``offset``), or POLICY_VIOLATION for a compact topic, as Kafka refuses it."""
        self.authorizer.check_topic(channel.principal, Operation.DELETE, topic)
        plog = self.leader_log(topic, partition)
        if plog.config.cleanup_policy == "compact":
            return ErrorCode.policy_violation, -1
        high = self.positions.high_watermark(plog)
        target = high if offset == HIGH_WATERMARK else offset
        if not 0 <= target <= high:
            raise OffsetOutOfRangeError(
                f"cannot delete the records of {topic}-{partition} before offset {offset}: "
                f"give an offset from 0 to the high watermark {high}, or -1 for the high watermark",
                plog.start_message,
                high,
            )
        return ErrorCode.none, plog.delete_records_before(target).message


__all__ = ["HIGH_WATERMARK", "KafkaDeleteRecords"]
