"""What the request services answer, typed and free of any wire format (sans IO).

A service takes a typed request (the parsed parts of :mod:`broker.wire`, which every
front end builds) and gives back one of these; each front end renders it in its own
protocol: ``native/`` as msgpack frames, ``kafka/`` through kio. Per-part outcomes are
NamedTuples (one object per part, never per message), and a fetch's bytes stay in
their files as slices, sent with sendfile or read once by the front end that must
convert them.

Errors of a whole request are raised (a :class:`~broker.common.errors.LogferryError`);
errors of one part are in that part, as a :mod:`broker.common.errors` code and message
(produce, fetch) or as the exception itself (metadata), which each front end maps to
its own codes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker.common.errors import LogferryError
from broker.wire.fetch import FetchAnswerPart, ReplicaFetchAnswerPart
from broker.wire.produce import ProduceAnswerPart


@dataclass(slots=True)
class ProduceResult:
    """The outcome of a produce: one :class:`ProduceAnswerPart` per part, in request
    order (a malformed part last), once every part is as safe as ``acks`` asks. A
    slotted class, not a NamedTuple: made once per request, and a producer of single
    messages sends one request per message (about half a NamedTuple's cost)."""

    parts: list[ProduceAnswerPart]
    """Per part: topic, partition, error code (0: appended), base offset, message."""
    failed: bool
    """Whether any part failed."""


ProduceReply = Callable[[ProduceResult], None]
"""Where :meth:`ProduceService.produce` delivers its result: called once, at once or
after the fsyncs and replicas the request's ``acks`` waits for."""


class FetchResult(NamedTuple):
    """The outcome of a fetch: per part its answer and the file slice of its bytes."""

    parts: Sequence[FetchAnswerPart | ReplicaFetchAnswerPart]
    """Per part, in request order: error code, start, visible end, byte count (and the
    log end for a follower)."""
    slices: Sequence[Any]
    """Per part a :class:`~broker.storage.partition_log.FileSlice` (None for a failed
    part): where its bytes lie, never read into Python by the service."""
    nbytes: int
    """The bytes of every slice together."""


FetchReply = Callable[[FetchResult], None]
"""Where :meth:`FetchService.fetch` delivers its result: once, possibly from the
wake-up that ended its long poll (the answer then goes out in that loop turn)."""


class MetadataQuery(NamedTuple):
    """A metadata request as every front end asks it."""

    topics: Sequence[str] | None
    """Topic names, or None for every topic the principal may describe."""
    create: bool
    """Create unknown topics (if the broker's ``auto_create_topics`` allows it)."""
    listener: str = "default"
    """The listener the request came on: the brokers' addresses are that listener's."""
    kafka: bool = False
    """The request came on the Kafka listener: the brokers' Kafka addresses, and only
    the brokers that have one."""


class BrokerNode(NamedTuple):
    """A live broker as a client of the asking listener reaches it."""

    broker_id: int
    host: str
    port: int
    datacenter: str
    rack: str


class PartitionMetadata(NamedTuple):
    """One partition's leader, epoch and replicas."""

    partition: int
    leader: int
    """The leader's broker id (-1: none right now)."""
    leader_epoch: int
    """-1: no state yet."""
    replicas: list[int]
    """Replica broker ids, the preferred leader first."""
    isr: list[int]
    """In-sync replica broker ids."""
    offline: list[int]
    """Replicas on brokers that are not live."""


class TopicResult(NamedTuple):
    """One topic asked about: its partitions, or why it has none."""

    name: str
    error: LogferryError | None
    """Why the topic has no metadata (refused, unknown, invalid name, ...), else None."""
    partitions: list[PartitionMetadata]
    """By partition number."""
    config: dict[str, Any]
    """The topic's settings recorded at creation."""
    topic_id: int
    """The topic's identity (its znode's creation zxid; 0: unknown)."""


class MetadataResult(NamedTuple):
    """The cluster as the asking listener's clients see it, computed once for every
    front end (:meth:`AdminService.metadata`)."""

    brokers: list[BrokerNode]
    """Live brokers with an address on the asking listener, by id."""
    topics: list[TopicResult]
    """The topics asked about, in the order asked (every describable one, sorted, when
    none were named)."""
    controller: int
    """The controller's broker id (-1: none right now)."""
    auto_create: bool
    """Whether the broker creates unknown topics asked for with ``create``."""


class ProducerIdResult(NamedTuple):
    """A new idempotent producer's id and the epoch to start at."""

    producer_id: int
    epoch: int


__all__ = [
    "BrokerNode",
    "FetchReply",
    "FetchResult",
    "MetadataQuery",
    "MetadataResult",
    "PartitionMetadata",
    "ProduceReply",
    "ProduceResult",
    "ProducerIdResult",
    "TopicResult",
]
