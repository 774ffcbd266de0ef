"""logferry's client library: the broker's public face (see docs/client.md).

agent, mirror, hadoop_loader and demo import from here (and from ``broker.common``)
only; the modules behind these names may move.
"""

from broker.client.admin import Admin, BrokerInfo, ClusterState, ListenerInfo, PartitionInfo
from broker.client.agent_record import AGENT_RECORD_FIELDS, agent_record
from broker.client.appender import AppendAtAnswerPart, AppendAtPart, Appender
from broker.client.audit import (
    AGENT_STAGE,
    LANDED_STAGE,
    MIRROR_STAGE,
    STAGE_ORDER,
    AuditLedger,
    AuditRecord,
    WindowCounts,
    batch_timestamp,
    batch_windows,
    stage_rank,
    window_of,
)
from broker.client.batches import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    CODECS,
    MAX_BATCH_BYTES,
    Batch,
    compress_batch,
    decode_batch,
    encode_batch,
)
from broker.client.consumer import FetchResult, Message, OffsetRange, SimpleConsumer, messages_of
from broker.client.group import (
    Committed,
    GroupAdmin,
    GroupConsumer,
    Lag,
    MessageStream,
    Observation,
    PartitionNotOwnedError,
    PartitionStatus,
    RawBatch,
    StatusWindows,
    group_lag,
    group_status,
    partition_status,
)
from broker.client.group.status import SEVERITY as STATUS_SEVERITY
from broker.client.heartbeat import AGENTS_TOPIC, AgentHeartbeat, file_entries
from broker.client.producer import DeliveryFuture, Producer
from broker.common.errors import *  # noqa: F401,F403 - the errors are part of the client's api
from broker.common.errors import LogferryError
from broker.common.sasl import SaslCredentials

__all__ = [
    "AGENT_RECORD_FIELDS",
    "AGENT_STAGE",
    "Admin",
    "agent_record",
    "AppendAtAnswerPart",
    "AppendAtPart",
    "Appender",
    "AuditRecord",
    "Batch",
    "BrokerInfo",
    "CODECS",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "Committed",
    "compress_batch",
    "DeliveryFuture",
    "FetchResult",
    "GroupAdmin",
    "GroupConsumer",
    "Lag",
    "ListenerInfo",
    "LogferryError",
    "MAX_BATCH_BYTES",
    "Message",
    "MessageStream",
    "OffsetRange",
    "PartitionInfo",
    "PartitionNotOwnedError",
    "Producer",
    "RawBatch",
    "SaslCredentials",
    "SimpleConsumer",
    "decode_batch",
    "WindowCounts",
    "encode_batch",
    "group_lag",
    "messages_of",
    "window_of",
    "ClusterState",
    "Observation",
    "PartitionStatus",
    "STATUS_SEVERITY",
    "StatusWindows",
    "group_status",
    "partition_status",
    "AGENTS_TOPIC",
    "AgentHeartbeat",
    "AuditLedger",
    "LANDED_STAGE",
    "MIRROR_STAGE",
    "STAGE_ORDER",
    "batch_timestamp",
    "batch_windows",
    "stage_rank",
    "file_entries",
]
