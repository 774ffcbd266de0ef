"""The metadata api (key 3), typed: brokers, topics, leaders, replicas and ISRs.

Request fields: ``topics`` (a list of names, or nil for every topic) and ``create``
(auto-create unknown topics where the broker allows it). Answer: ``brokers`` (``{id:
[host, port, datacenter, rack]}``), ``topics`` (``{name: {err, msg?, partitions,
replicas, isr, epochs, config}}``), ``controller`` and ``auto_create`` (whether the
broker creates unknown topics asked for with ``create``; absent from older brokers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.wire.fields import ANSWER, as_int, as_map, header_of, shown


class MetadataRequest(NamedTuple):
    """Which topics a client asks about."""

    topics: list[str] | None
    """Topic names, or None for every topic."""
    create: bool
    """Create unknown topics (if the broker's ``auto_create_topics`` allows it)."""


class BrokerAddress(NamedTuple):
    """A live broker (packed as the list ``[host, port, datacenter, rack]``)."""

    host: str
    """Host name or address clients connect to."""
    port: int
    """Its port."""
    datacenter: str = ""
    """The datacenter it registered with ("" from brokers that predate it)."""
    rack: str = ""
    """Its rack ("" when none)."""


class TopicMetadata(NamedTuple):
    """One topic's state; ``error`` and ``message`` only when it has none."""

    error: int
    """0, or why the topic has no metadata (unknown, invalid name, ...)."""
    message: str | None
    """What went wrong (with ``error``), else None."""
    partitions: dict[int, int]
    """Partition -> leader broker id (-1: no leader right now)."""
    replicas: dict[int, list[int]]
    """Partition -> replica broker ids, the preferred leader first."""
    isr: dict[int, list[int]]
    """Partition -> in-sync replica broker ids."""
    epochs: dict[int, int]
    """Partition -> leader epoch (-1: no state yet)."""
    config: dict[str, Any]
    """The topic's settings recorded at creation (``min_insync_replicas``)."""


class MetadataAnswer(NamedTuple):
    """The broker's current view of the cluster."""

    brokers: dict[int, BrokerAddress]
    """Live brokers by id."""
    topics: dict[str, TopicMetadata]
    """The topics asked about (all of them when the request named none)."""
    controller: int
    """The controller's broker id (-1: none right now)."""
    auto_create: bool | None = None
    """Whether the broker creates unknown topics asked for with ``create`` (its
    ``auto_create_topics``); None from a broker that does not say."""


def topic_error(code: int, message: str) -> TopicMetadata:
    """A topic entry that says only why there is none."""
    return TopicMetadata(code, message, {}, {}, {}, {}, {})


def parse_metadata_request(header: dict[str, Any]) -> MetadataRequest:
    """Check a metadata request (InvalidRequestError)."""
    wanted = header_of(header).get("topics")
    if wanted is not None and not (type(wanted) is list and all(type(t) is str for t in wanted)):
        raise InvalidRequestError("metadata 'topics' must be a list of names or nil")
    return MetadataRequest(wanted, bool(header.get("create", False)))


def encode_metadata_request(topics: Sequence[str] | None, create: bool = False) -> dict[str, Any]:
    """The header fields of a metadata request."""
    return {"topics": list(topics) if topics is not None else None, "create": create}


def encode_metadata_answer(answer: MetadataAnswer) -> dict[str, Any]:
    """The header fields of a metadata answer."""
    topics: dict[str, Any] = {}
    for name, info in answer.topics.items():
        if info.error:
            topics[name] = {"err": info.error, "msg": info.message}
        else:
            topics[name] = {
                "err": 0,
                "partitions": info.partitions,
                "replicas": info.replicas,
                "isr": info.isr,
                "epochs": info.epochs,
                "config": info.config,
            }
    fields = {
        "brokers": {b: list(a) for b, a in answer.brokers.items()},
        "topics": topics,
        "controller": answer.controller,
    }
    if answer.auto_create is not None:
        fields["auto_create"] = answer.auto_create
    return fields


def parse_metadata_answer(header: dict[str, Any]) -> MetadataAnswer:
    """A metadata answer; ProtocolError if the broker sent something else.

    Fields that older brokers did not send (datacenter, rack, replicas, isr, epochs,
    config) get the defaults those brokers implied: the leader alone, epoch -1.
    """
    header = header_of(header, ANSWER)
    brokers = {}
    for b, entry in as_map(header.get("brokers", {}), "metadata 'brokers'", ANSWER).items():
        if (
            type(entry) is not list
            or not 2 <= len(entry) <= 4
            or type(entry[0]) is not str
            or type(entry[1]) is not int
            or not all(type(x) is str for x in entry[2:])
        ):
            raise ANSWER(f"a metadata broker entry must be [host, port, datacenter, rack], got {shown(entry)}")
        brokers[as_int(b, "a broker id", ANSWER)] = BrokerAddress(*entry)
    topics = {}
    for name, info in as_map(header.get("topics", {}), "metadata 'topics'", ANSWER).items():
        if type(name) is not str:
            raise ANSWER(f"a topic name must be a string, got {shown(name)}")
        topics[name] = _topic(name, as_map(info, f"metadata of topic {name!r}", ANSWER))
    controller = header.get("controller", -1)
    auto_create = header.get("auto_create")
    if auto_create is not None and type(auto_create) is not bool:
        raise ANSWER(f"metadata 'auto_create' must be a boolean, got {shown(auto_create)}")
    return MetadataAnswer(
        brokers, topics, as_int(-1 if controller is None else controller, "metadata 'controller'", ANSWER), auto_create
    )


def _topic(name: str, info: dict[str, Any]) -> TopicMetadata:
    err = as_int(info.get("err", 0), f"metadata 'err' of topic {name!r}", ANSWER)
    if err:
        message = info.get("msg")
        return topic_error(err, message if type(message) is str else "")
    leaders = _int_map(info.get("partitions", {}), name, "partitions")
    replicas = info.get("replicas")
    isr = info.get("isr")
    epochs = info.get("epochs")
    config = as_map(info.get("config", {}), f"metadata 'config' of topic {name!r}", ANSWER)
    return TopicMetadata(
        0,
        None,
        {p: leader for p, leader in leaders.items()},
        {p: _ids(replicas, p, leader, name, "replicas") for p, leader in leaders.items()},
        {p: _ids(isr, p, leader, name, "isr") for p, leader in leaders.items()},
        _int_map(epochs, name, "epochs") if epochs is not None else {p: -1 for p in leaders},
        config,
    )


def _int_map(value: Any, topic: str, field: str) -> dict[int, int]:
    mapping = as_map(value, f"metadata '{field}' of topic {topic!r}", ANSWER)
    for key, item in mapping.items():
        if type(key) is not int or type(item) is not int:
            raise ANSWER(
                f"metadata '{field}' of topic {topic!r} must map partitions to "
                f"integers, got {shown(key)}: {shown(item)}"
            )
    return mapping


def _ids(mapping: Any, partition: int, leader: int, topic: str, field: str) -> list[int]:
    if mapping is None:
        return [leader]
    ids = as_map(mapping, f"metadata '{field}' of topic {topic!r}", ANSWER).get(partition, [leader])
    if type(ids) is not list or not all(type(b) is int for b in ids):
        raise ANSWER(f"metadata '{field}' of topic {topic!r} must list broker ids, got {shown(ids)}")
    return ids


__all__ = [
    "BrokerAddress",
    "MetadataAnswer",
    "MetadataRequest",
    "TopicMetadata",
    "encode_metadata_answer",
    "encode_metadata_request",
    "parse_metadata_answer",
    "parse_metadata_request",
    "topic_error",
]
