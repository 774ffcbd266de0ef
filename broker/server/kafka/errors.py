"""logferry's error codes (:mod:`broker.common.errors`) as Kafka's error codes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.common import errors

_BY_CLASS: dict[type[errors.LogferryError], ErrorCode] = {
    errors.UnknownTopicOrPartitionError: ErrorCode.unknown_topic_or_partition,
    errors.OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    errors.InvalidOffsetError: ErrorCode.offset_out_of_range,
    errors.CorruptBatchError: ErrorCode.corrupt_message,
    errors.InvalidTopicError: ErrorCode.invalid_topic_exception,
    errors.NotLeaderError: ErrorCode.not_leader_or_follower,
    errors.LeaderNotAvailableError: ErrorCode.leader_not_available,
    errors.RequestTimedOutError: ErrorCode.request_timed_out,
    errors.TopicExistsError: ErrorCode.topic_already_exists,
    errors.MessageTooLargeError: ErrorCode.message_too_large,
    errors.NotEnoughReplicasError: ErrorCode.not_enough_replicas,
    errors.NotEnoughReplicasAfterAppendError: ErrorCode.not_enough_replicas_after_append,
    errors.StaleEpochError: ErrorCode.fenced_leader_epoch,
    errors.BrokerShuttingDownError: ErrorCode.not_leader_or_follower,
    errors.DiskFullError: ErrorCode.kafka_storage_error,
    errors.StorageError: ErrorCode.kafka_storage_error,
    errors.InvalidRequestError: ErrorCode.invalid_request,
    errors.InvalidTopicConfigError: ErrorCode.invalid_config,
    errors.OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    errors.ProducerFencedError: ErrorCode.invalid_producer_epoch,
    errors.InvalidPartitionsError: ErrorCode.invalid_partitions,
    errors.ControlBatchRefusedError: ErrorCode.invalid_record,
    errors.TopicAuthorizationFailedError: ErrorCode.topic_authorization_failed,
    errors.GroupAuthorizationFailedError: ErrorCode.group_authorization_failed,
    errors.ClusterAuthorizationFailedError: ErrorCode.cluster_authorization_failed,
    errors.TransactionalIdAuthorizationFailedError: ErrorCode.transactional_id_authorization_failed,
}
_BY_CODE = {cls.code: kafka for cls, kafka in _BY_CLASS.items() if hasattr(cls, "code")}
_BY_CODE[errors.DiskFullError.code] = ErrorCode.kafka_storage_error


def kafka_error(exc: errors.LogferryError) -> ErrorCode:
    """The Kafka error code for a logferry error (UNKNOWN_SERVER_ERROR if none fits);
    retriable errors map to retriable codes so Kafka clients retry them."""
    for cls in type(exc).__mro__:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    return ErrorCode.unknown_server_error


def kafka_error_of_code(code: int) -> ErrorCode:
    """The Kafka error code for a logferry wire error code (0: none)."""
    if code == 0:
        return ErrorCode.none
    return _BY_CODE.get(code, ErrorCode.unknown_server_error)


__all__ = ["kafka_error", "kafka_error_of_code"]
