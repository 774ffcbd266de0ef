"""The topic administration apis, typed: create_topic (4), delete_topic (5),
elect_leaders (6), alter_topic (7) and create_partitions (8)."""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common import topic_config
from broker.common.errors import InvalidPartitionsError, InvalidRequestError
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
    config: dict[str, Any] = {}
    """Per-topic settings (:mod:`broker.common.topic_config`), checked."""


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


class AlterTopicRequest(NamedTuple):
    """Change a topic's settings: ``set`` these, then remove ``delete`` (back to the
    broker defaults)."""

    topic: str
    set: dict[str, Any]
    """Checked settings to add or change."""
    delete: list[str]
    """Known setting names to remove."""


class AlterTopicAnswer(NamedTuple):
    """The topic's settings after the change."""

    config: dict[str, Any]


class CreatePartitionsRequest(NamedTuple):
    """Grow a topic to ``partitions`` partitions (never fewer than it has)."""

    topic: str
    partitions: int
    """The new total, 1 to :data:`MAX_PARTITIONS`."""


class CreatePartitionsAnswer(NamedTuple):
    """The topic's whole replica assignment after growing."""

    partitions: dict[int, list[int]]


def _config_field(header: dict[str, Any], name: str) -> dict[str, Any]:
    raw = header.get(name) or {}
    if not isinstance(raw, dict):
        raise InvalidRequestError(f"{name} must be a map of topic settings")
    return topic_config.validate(raw)


def parse_create_topic_request(header: dict[str, Any]) -> CreateTopicRequest:
    """Check a create_topic request (InvalidTopicError, InvalidRequestError)."""
    topic = validate_topic_name(header_of(header).get("topic"))
    partitions = header.get("partitions") or 0
    if type(partitions) is not int or not 0 <= partitions <= MAX_PARTITIONS:
        raise InvalidRequestError(f"partitions must be an integer from 1 to {MAX_PARTITIONS}")
    rf = header.get("replication_factor") or 0
    if type(rf) is not int or not 0 <= rf <= MAX_REPLICATION_FACTOR:
        raise InvalidRequestError(
            f"replication_factor must be an integer from 1 to "
            f"{MAX_REPLICATION_FACTOR} (0: the broker's "
            "default_replication_factor)"
        )
    min_isr = header.get("min_insync_replicas") or None
    if min_isr is not None and (type(min_isr) is not int or min_isr < 1):
        raise InvalidRequestError("min_insync_replicas must be a positive integer")
    config = _config_field(header, "config")
    return CreateTopicRequest(topic, partitions, rf, min_isr, config)


def encode_create_topic_request(request: CreateTopicRequest) -> dict[str, Any]:
    """The header fields of a create_topic request (None min ISR is sent as 0)."""
    fields = {
        "topic": request.topic,
        "partitions": request.partitions,
        "replication_factor": request.replication_factor,
        "min_insync_replicas": request.min_insync_replicas or 0,
    }
    if request.config:
        fields["config"] = dict(request.config)
    return fields


def parse_alter_topic_request(header: dict[str, Any]) -> AlterTopicRequest:
    """Check an alter_topic request: known keys, valid values (InvalidTopicConfigError)."""
    topic = validate_topic_name(header_of(header).get("topic"))
    delete = header.get("delete") or []
    if type(delete) is not list:
        raise InvalidRequestError("delete must be a list of topic setting names")
    request = AlterTopicRequest(topic, _config_field(header, "set"), [topic_config.check_key(k) for k in delete])
    if not request.set and not request.delete:
        raise InvalidRequestError("alter_topic needs settings to set or delete")
    return request


def encode_alter_topic_request(request: AlterTopicRequest) -> dict[str, Any]:
    """The header fields of an alter_topic request."""
    return {"topic": request.topic, "set": dict(request.set), "delete": list(request.delete)}


def parse_alter_topic_answer(header: dict[str, Any]) -> AlterTopicAnswer:
    """An alter_topic answer: the settings now in force."""
    return AlterTopicAnswer(dict(as_map(header_of(header, ANSWER).get("config", {}), "alter_topic 'config'", ANSWER)))


def parse_create_partitions_request(header: dict[str, Any]) -> CreatePartitionsRequest:
    """Check a create_partitions request (InvalidTopicError, InvalidPartitionsError)."""
    topic = validate_topic_name(header_of(header).get("topic"))
    partitions = header.get("partitions")
    if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"partitions must be an integer from 1 to {MAX_PARTITIONS}")
    return CreatePartitionsRequest(topic, partitions)


def encode_create_partitions_request(request: CreatePartitionsRequest) -> dict[str, Any]:
    """The header fields of a create_partitions request."""
    return {"topic": request.topic, "partitions": request.partitions}


def encode_create_topic_answer(answer: CreateTopicAnswer) -> dict[str, Any]:
    """The header fields of a create_topic answer."""
    return {"partitions": answer.partitions}


def parse_create_topic_answer(header: dict[str, Any]) -> CreateTopicAnswer:
    """A create_topic answer; ProtocolError if the broker sent something else."""
    return CreateTopicAnswer(_assignment(header, "create_topic"))


def parse_create_partitions_answer(header: dict[str, Any]) -> CreatePartitionsAnswer:
    """A create_partitions answer: the whole assignment after growing."""
    return CreatePartitionsAnswer(_assignment(header, "create_partitions"))


def _assignment(header: dict[str, Any], api: str) -> dict[int, list[int]]:
    raw = as_map(header_of(header, ANSWER).get("partitions"), f"{api} 'partitions'", ANSWER)
    for p, replicas in raw.items():
        if type(p) is not int or type(replicas) is not list or not all(type(b) is int for b in replicas):
            raise ANSWER(f"{api} 'partitions' must map partitions to broker ids, got {shown(p)}: {shown(replicas)}")
    return raw


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
    "AlterTopicAnswer",
    "AlterTopicRequest",
    "CreatePartitionsAnswer",
    "CreatePartitionsRequest",
    "encode_alter_topic_request",
    "encode_create_partitions_request",
    "parse_alter_topic_answer",
    "parse_alter_topic_request",
    "parse_create_partitions_answer",
    "parse_create_partitions_request",
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
