"""The broker package's error hierarchy and the wire error codes.

Every error a user can meet derives from :class:`LogferryError` and carries a message
that says what went wrong and what to do. Errors that travel over the wire have a
numeric ``code``; :func:`error_for_code` turns a code from a response back into the
matching class on the client side, so both ends speak one vocabulary.
"""

from __future__ import annotations


class LogferryError(Exception):
    """Root of every error raised by the broker package and its client library."""

    code: int = 1
    retriable: bool = False


class ConfigError(LogferryError):
    """A configuration file or option is missing, malformed or out of range.

    An error about a key of a config file also carries the key's dotted path (``key``)
    and the file (``file``, "" for a config built from a dict); broker.common.config
    formats its message as ``<file>: <key>: <problem>``.
    """

    def __init__(self, message: str, *, key: str = "", file: str = ""):
        super().__init__(message)
        self.key = key
        self.file = file


class ProtocolError(LogferryError):
    """Bytes on a connection do not form a valid frame; the connection is closed."""

    code = 4


class UnknownError(LogferryError):
    """The broker failed in a way it could not classify (see its log)."""

    code = 1


class UnsupportedApiError(LogferryError):
    """The request names an api key or version this broker does not serve."""

    code = 2


class FrameTooLargeError(ProtocolError):
    """A frame is larger than the broker's ``max.request.bytes``."""

    code = 3


class InvalidRequestError(LogferryError):
    """The request header is not a msgpack map with the fields its api needs."""

    code = 4


class CorruptBatchError(LogferryError):
    """A batch fails its CRC or its header is malformed."""

    code = 5


class UnknownTopicOrPartitionError(LogferryError):
    """The topic or partition does not exist (or is not hosted by this broker)."""

    code = 6
    retriable = True


class OffsetOutOfRangeError(LogferryError):
    """The offset lies outside the partition's retained range."""

    code = 7

    def __init__(self, message: str, start: int | None = None, end: int | None = None):
        super().__init__(message)
        self.start = start
        self.end = end


class InvalidOffsetError(LogferryError):
    """The offset is inside the log but is not the start of a batch."""

    code = 8


class InvalidTopicError(LogferryError):
    """A topic name breaks the naming rule ``[A-Za-z0-9._-]{1,249}``, not ``.``/``..``."""

    code = 9


class NotLeaderError(LogferryError):
    """This broker does not host (lead) the partition; refresh metadata and retry."""

    code = 10
    retriable = True


class RequestTimedOutError(LogferryError):
    """No response arrived in time; the request may or may not have been applied."""

    code = 11
    retriable = True


class TopicExistsError(LogferryError):
    """A topic of that name already exists."""

    code = 12


class StorageError(LogferryError):
    """The broker could not write or read its log (disk full, I/O error)."""

    code = 13
    retriable = True


class DiskFullError(StorageError):
    """A log dir has no space left (ENOSPC, or EDQUOT for a quota): the broker refused
    the write and its log is unchanged. Not retriable: the disk stays full until an
    operator frees space there (retention, another log dir), so a producer fails the
    batch at once instead of retrying until its delivery timeout. ``log_dir`` is the
    full directory ("" when the error came over the wire: the message names it)."""

    code = 21
    retriable = False

    def __init__(self, message: str, *, log_dir: str = ""):
        super().__init__(message)
        self.log_dir = log_dir


class BrokerShuttingDownError(LogferryError):
    """The broker is stopping; retry against its replacement."""

    code = 14
    retriable = True


class MessageTooLargeError(LogferryError):
    """A single message set exceeds what the broker or producer accepts."""

    code = 15


class BrokerNotAvailableError(LogferryError):
    """No broker could be reached (connection refused, reset or timed out)."""

    code = 16
    retriable = True


class TlsHandshakeError(BrokerNotAvailableError):
    """The TLS handshake with a broker failed: its certificate did not verify (unknown
    CA, expired, or a name that does not match the host) or the two ends share no
    protocol version or cipher. Not retriable: the same handshake fails again until a
    certificate or a CA file is changed. Never sent on the wire (it has no code of its
    own); a client that meets it tries another broker like any unreachable one."""

    retriable = False


class ListenError(LogferryError):
    """A server could not open its listening socket (port taken, address not on this
    machine, a privileged port, or a host name that does not resolve)."""


class NotEnoughReplicasError(LogferryError):
    """acks=all was asked but fewer replicas than ``min_insync_replicas`` are in sync.

    Raised before the append, so nothing was written; retry once replicas are back.
    """

    code = 17
    retriable = True


class NotEnoughReplicasAfterAppendError(LogferryError):
    """The leader appended an acks=all batch but the in-sync replicas did not all get it
    in time (or the leader lost its leadership); it may or may not be kept."""

    code = 18
    retriable = True


class LeaderNotAvailableError(LogferryError):
    """The partition has no leader right now (election under way, or every in-sync
    replica is down); retry after a short wait."""

    code = 19
    retriable = True


class StaleEpochError(LogferryError):
    """A replica fetch names a leader epoch that the leader does not have (one of the
    two is out of date); the follower waits for the new partition state."""

    code = 20
    retriable = True


class AuthenticationError(LogferryError):
    """Authentication failed: a wrong user name or password (SCRAM tells no more, so
    neither does this), or the broker refused the exchange. Not retriable: the same
    credentials fail again until they are changed (``logferry user create``)."""

    code = 30


class UnsupportedSaslMechanismError(AuthenticationError):
    """The client asked for a SASL mechanism this broker does not enable."""

    code = 31


class IllegalSaslStateError(AuthenticationError):
    """A SASL request out of order (authenticate before handshake, a second exchange
    after success, or SASL on a listener that does not offer it)."""

    code = 32


class AuthenticationRequiredError(AuthenticationError):
    """The broker requires authentication and the connection sent another request
    first; the broker answers this and closes the connection."""

    code = 33


class AuthorizationError(LogferryError):
    """The broker's authorizer refused the request: its principal lacks the operation on
    the resource (the message names all three). Not retriable: the same request is
    refused until an operator adds an ACL (``logferry acl add``). Only its subclasses
    are raised, each with its own wire code."""


class TopicAuthorizationFailedError(AuthorizationError):
    """The principal may not do this to the topic (produce, consume, describe, ...)."""

    code = 35


class GroupAuthorizationFailedError(AuthorizationError):
    """The principal may not do this to the consumer group."""

    code = 36


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    """The principal may not use the Kafka transactional id (``produce`` on it)."""

    code = 38


class ClusterAuthorizationFailedError(AuthorizationError):
    """The principal may not do this to the cluster (replicate, elect leaders)."""

    code = 37


class InvalidTopicConfigError(InvalidRequestError):
    """A per-topic setting is unknown or out of range (``key`` names it); nothing changed."""

    code = 50

    def __init__(self, message: str, *, key: str = ""):
        super().__init__(message)
        self.key = key


class ControlBatchRefusedError(LogferryError):
    """A producer sent a control batch (a transaction marker: Kafka's CONTROL attribute):
    only the transaction coordinator writes those; nothing was appended."""

    code = 52


class InvalidPartitionsError(InvalidRequestError):
    """A partition count that cannot be applied (fewer than the topic has: partitions
    are never removed); nothing changed."""

    code = 51


class ReassignmentError(InvalidRequestError):
    """A reassignment plan, throttle or decommission that cannot be carried out (an
    unknown broker or partition, too few brokers, one already under way); nothing
    changed."""


class OutOfOrderSequenceError(LogferryError):
    """An idempotent producer's batch does not follow its previous one in the partition
    (a gap in its sequence numbers: a batch before it was lost). Nothing was appended.
    Not retriable as is: the producer fails the batch and bumps its epoch, which
    restarts its sequences (docs/guarantees.md)."""

    code = 40


class ProducerFencedError(LogferryError):
    """A batch carries an older epoch of its producer id than the partition has seen:
    it comes from a producer that was replaced (or reset its sequences). Nothing was
    appended; that producer must stop or start over with a new id."""

    code = 41


class OffsetMismatchError(LogferryError):
    """An append-at (the offset-preserving mirror's append) named an offset that is not
    the partition's log end: nothing was appended. ``end`` (and ``start``) say where the
    log really ends (starts), so the caller can resume from there or report that the
    logs diverged."""

    code = 45

    def __init__(self, message: str, start: int | None = None, end: int | None = None):
        super().__init__(message)
        self.start = start
        self.end = end


class MirrorDivergedError(LogferryError):
    """A mirror target partition is no copy of its source partition (written by
    someone else, a batch differs, or retention on one side only removed bytes the
    other still needs); the mirror stops that partition and never splices."""

    code = 46


class BufferFullError(LogferryError):
    """The producer's buffer stayed full for longer than its block timeout."""


class ProducerClosedError(LogferryError):
    """``send`` was called on a producer that is closed."""


class ZooKeeperError(LogferryError):
    """ZooKeeper could not be reached or answered an error."""

    retriable = True


class NoClusterError(ZooKeeperError):
    """ZooKeeper answered, but no broker ever registered under the chroot: a mistyped
    connect string, which waiting does not mend (unlike an unreachable ZooKeeper)."""

    retriable = False


class MetricsError(ListenError):
    """A metrics endpoint cannot be served (its port is taken, its host unknown)."""


_BY_CODE: dict[int, type[LogferryError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        UnsupportedApiError,
        FrameTooLargeError,
        InvalidRequestError,
        CorruptBatchError,
        UnknownTopicOrPartitionError,
        OffsetOutOfRangeError,
        InvalidOffsetError,
        InvalidTopicError,
        NotLeaderError,
        RequestTimedOutError,
        TopicExistsError,
        StorageError,
        BrokerShuttingDownError,
        MessageTooLargeError,
        BrokerNotAvailableError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
        LeaderNotAvailableError,
        StaleEpochError,
        DiskFullError,
        AuthenticationError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        AuthenticationRequiredError,
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
        InvalidTopicConfigError,
        InvalidPartitionsError,
        ControlBatchRefusedError,
        OutOfOrderSequenceError,
        ProducerFencedError,
        OffsetMismatchError,
        MirrorDivergedError,
    )
}

NO_ERROR = 0


def error_for_code(code: int, message: str = "") -> LogferryError:
    """Build the exception that a wire error ``code`` stands for."""
    cls = _BY_CODE.get(code, UnknownError)
    return cls(message or f"broker answered error code {code} ({cls.__name__})")


__all__ = [
    "AuthenticationError",
    "AuthenticationRequiredError",
    "IllegalSaslStateError",
    "UnsupportedSaslMechanismError",
    "AuthorizationError",
    "ClusterAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "ControlBatchRefusedError",
    "GroupAuthorizationFailedError",
    "TopicAuthorizationFailedError",
    "BrokerNotAvailableError",
    "BrokerShuttingDownError",
    "BufferFullError",
    "ConfigError",
    "CorruptBatchError",
    "DiskFullError",
    "FrameTooLargeError",
    "InvalidOffsetError",
    "InvalidPartitionsError",
    "InvalidTopicConfigError",
    "InvalidRequestError",
    "MetricsError",
    "MirrorDivergedError",
    "OffsetMismatchError",
    "InvalidTopicError",
    "LeaderNotAvailableError",
    "ListenError",
    "LogferryError",
    "MessageTooLargeError",
    "NO_ERROR",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProtocolError",
    "ReassignmentError",
    "RequestTimedOutError",
    "StaleEpochError",
    "StorageError",
    "TlsHandshakeError",
    "TopicExistsError",
    "UnknownError",
    "UnknownTopicOrPartitionError",
    "UnsupportedApiError",
    "ZooKeeperError",
    "NoClusterError",
    "error_for_code",
]
