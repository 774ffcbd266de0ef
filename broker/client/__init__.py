"""logferry's client library: the broker's public face (see docs/client.md)."""

from broker.client.admin import Admin, BrokerInfo, PartitionInfo
from broker.client.group import GroupConsumer
from broker.client.consumer import FetchResult, Message, OffsetRange, SimpleConsumer, messages_of
from broker.client.producer import DeliveryFuture, Producer
from broker.common.errors import *  # noqa: F401,F403 - the errors are part of the client's api
from broker.common.errors import LogferryError
from broker.wire.records import Batch

__all__ = [
    "Admin", "Batch", "BrokerInfo", "DeliveryFuture", "FetchResult", "GroupConsumer",
    "PartitionInfo",
    "LogferryError", "Message", "OffsetRange", "Producer", "SimpleConsumer", "messages_of",
]
