"""logferry's client library: the broker's public face (see docs/client.md).

agent, mirror, hadoop_loader and demo import from here (and from ``broker.common``)
only; the modules behind these names may move.
"""

from broker.client.admin import Admin, BrokerInfo, PartitionInfo
from broker.client.audit import AuditRecord, window_of
from broker.client.batches import (
    CODEC_GZIP,
    CODEC_NONE,
    MAX_BATCH_BYTES,
    Batch,
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
    PartitionNotOwnedError,
    RawBatch,
    group_lag,
)
from broker.client.producer import DeliveryFuture, Producer
from broker.common.errors import *  # noqa: F401,F403 - the errors are part of the client's api
from broker.common.errors import LogferryError

__all__ = [
    "Admin", "AuditRecord", "Batch", "BrokerInfo", "CODEC_GZIP", "CODEC_NONE", "Committed",
    "DeliveryFuture", "FetchResult", "GroupAdmin", "GroupConsumer", "Lag", "LogferryError",
    "MAX_BATCH_BYTES", "Message", "MessageStream", "OffsetRange", "PartitionInfo",
    "PartitionNotOwnedError", "Producer", "RawBatch", "SimpleConsumer", "decode_batch",
    "encode_batch", "group_lag", "messages_of", "window_of",
]
