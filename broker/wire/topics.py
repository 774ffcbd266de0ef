"""The topic administration apis, typed: create_topic (4), delete_topic (5) and
elect_leaders (6)."""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.common.names import validate_topic_name
from broker.wire.fields import ANSWER, as_int, as_map, header_of, shown

MAX_PARTITIONS = 100_000
MAX_REPLICATION_FACTOR = 100


class CreateTopicRequest(NamedTuple):
    """A topic to create; zeros take the broker's defaults."""

    topic: str
    """A legal topic name."""
    partitions: int
    """1 to :data:`MAX_PARTITIONS`; 0 for the broker's ``num_partitions``."""
    replication_factor: int
    """1 to :data:`MAX_REPLICATION_FACTOR`; 0 for ``default_replication_factor``
    (capped at the live brokers)."""
    min_insync_replicas: int | None
    """Recorded with the topic; None leaves the leader's ``min_insync_replicas``."""


class CreateTopicAnswer(NamedTuple):
    """The new topic's replica assignment."""

    partitions: dict[int, list[int]]
    """Partition -> replica broker ids, the preferred leader first."""


class DeleteTopicRequest(NamedTuple):
    """A topic to delete with its data on every broker."""

    topic: str
    """A legal topic name."""


class ElectLeadersRequest(NamedTuple):
    """Ask the controller to hand each partition back to its preferred replica."""


class ElectLeadersAnswer(NamedTuple):
    """Who will run the elections."""

    controller: int
    """The controller's broker id (-1: none right now)."""


def parse_create_topic_request(header: dict[str, Any]) -> CreateTopicRequest:
    """Check a create_topic request (InvalidTopicError, InvalidRequestError)."""
    topic = validate_topic_name(header_of(header).get("topic"))
    partitions = header.get("partitions") or 0
    if type(partitions) is not int or not 0 <= partitions <= MAX_PARTITIONS:
        raise InvalidRequestError(f"partitions must be an integer from 1 to {MAX_PARTITIONS}")
    rf = header.get("replication_factor") or 0
    if type(rf) is not int or not 0 <= rf <= MAX_REPLICATION_FACTOR:
        raise InvalidRequestError(f"replication_factor must be an integer from 1 to "
                                  f"{MAX_REPLICATION_FACTOR} (0: the broker's "
                                  "default_replication_factor)")
    min_isr = header.get("min_insync_replicas") or None
    if min_isr is not None and (type(min_isr) is not int or min_isr < 1):
        raise InvalidRequestError("min_insync_replicas must be a positive integer")
    return CreateTopicRequest(topic, partitions, rf, min_isr)


def encode_create_topic_request(request: CreateTopicRequest) -> dict[str, Any]:
    """The header fields of a create_topic request (None min ISR is sent as 0)."""
    return {"topic": request.topic, "partitions": request.partitions,
            "replication_factor": request.replication_factor,
            "min_insync_replicas": request.min_insync_replicas or 0}


def encode_create_topic_answer(answer: CreateTopicAnswer) -> dict[str, Any]:
    """The header fields of a create_topic answer."""
    return {"partitions": answer.partitions}


def parse_create_topic_answer(header: dict[str, Any]) -> CreateTopicAnswer:
    """A create_topic answer; ProtocolError if the broker sent something else."""
    raw = as_map(header_of(header, ANSWER).get("partitions"), "create_topic 'partitions'",
                 ANSWER)
    for p, replicas in raw.items():
        if (type(p) is not int or type(replicas) is not list
                or not all(type(b) is int for b in replicas)):
            raise ANSWER(f"create_topic 'partitions' must map partitions to broker ids, "
                         f"got {shown(p)}: {shown(replicas)}")
    return CreateTopicAnswer(raw)


def parse_delete_topic_request(header: dict[str, Any]) -> DeleteTopicRequest:
    """Check a delete_topic request (InvalidTopicError)."""
    return DeleteTopicRequest(validate_topic_name(header_of(header).get("topic")))


def encode_delete_topic_request(request: DeleteTopicRequest) -> dict[str, Any]:
    """The header fields of a delete_topic request."""
    return {"topic": request.topic}


def parse_elect_leaders_request(header: dict[str, Any]) -> ElectLeadersRequest:
    """An elect_leaders request has no fields of its own."""
    header_of(header)
    return ElectLeadersRequest()


def encode_elect_leaders_answer(answer: ElectLeadersAnswer) -> dict[str, Any]:
    """The header fields of an elect_leaders answer."""
    return {"controller": answer.controller}


def parse_elect_leaders_answer(header: dict[str, Any]) -> ElectLeadersAnswer:
    """An elect_leaders answer (-1 when the broker names no controller)."""
    controller = header_of(header, ANSWER).get("controller", -1)
    return ElectLeadersAnswer(as_int(controller, "elect_leaders 'controller'", ANSWER))


__all__ = [
    "CreateTopicAnswer",
    "CreateTopicRequest",
    "DeleteTopicRequest",
    "ElectLeadersAnswer",
    "ElectLeadersRequest",
    "MAX_PARTITIONS",
    "MAX_REPLICATION_FACTOR",
    "encode_create_topic_answer",
    "encode_create_topic_request",
    "encode_delete_topic_request",
    "encode_elect_leaders_answer",
    "parse_create_topic_answer",
    "parse_create_topic_request",
    "parse_delete_topic_request",
    "parse_elect_leaders_answer",
    "parse_elect_leaders_request",
]
