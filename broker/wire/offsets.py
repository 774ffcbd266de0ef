"""The offsets api (key 2), typed: a partition's range, or the offset for a time."""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.common.names import validate_topic_name
from broker.wire.fields import ANSWER, as_int, header_of, shown

EARLIEST = "earliest"
LATEST = "latest"


class OffsetsRequest(NamedTuple):
    """Which offset of which partition a client asks for."""

    topic: str
    """A legal topic name."""
    partition: int
    """Partition of that topic."""
    at: str | int
    """``"earliest"`` (the first offset), ``"latest"`` (the visible end) or a time in
    milliseconds since the epoch (the last batch boundary at or before it)."""


class OffsetsAnswer(NamedTuple):
    """The broker's answer: the asked offset and the partition's range."""

    offset: int
    """The offset asked for."""
    start: int
    """The partition's first retained offset."""
    end: int
    """The partition's visible end."""
    avg_message_bytes: float | None
    """Average stored bytes per message (for lag in messages); nil before any."""


def parse_offsets_request(header: dict[str, Any]) -> OffsetsRequest:
    """Check an offsets request (InvalidRequestError, InvalidTopicError)."""
    topic = header_of(header).get("topic")
    partition = header.get("partition")
    if type(topic) is not str or type(partition) is not int:
        raise InvalidRequestError("topic must be a string and partition an integer")
    validate_topic_name(topic)
    at = header.get("at", LATEST)
    if at not in (EARLIEST, LATEST) and type(at) is not int:
        raise InvalidRequestError("offsets 'at' must be 'earliest', 'latest' or a time in ms")
    return OffsetsRequest(topic, partition, at)


def encode_offsets_request(request: OffsetsRequest) -> dict[str, Any]:
    """The header fields of an offsets request."""
    return {"topic": request.topic, "partition": request.partition, "at": request.at}


def encode_offsets_answer(answer: OffsetsAnswer) -> dict[str, Any]:
    """The header fields of an offsets answer."""
    return {"offset": answer.offset, "start": answer.start, "end": answer.end,
            "avg_message_bytes": answer.avg_message_bytes}


def parse_offsets_answer(header: dict[str, Any]) -> OffsetsAnswer:
    """An offsets answer; ProtocolError if the broker sent something else."""
    header = header_of(header, ANSWER)
    avg = header.get("avg_message_bytes")
    if avg is not None and type(avg) not in (int, float):
        raise ANSWER(f"offsets answer 'avg_message_bytes' must be a number, got {shown(avg)}")
    return OffsetsAnswer(as_int(header.get("offset"), "offsets answer 'offset'", ANSWER),
                         as_int(header.get("start"), "offsets answer 'start'", ANSWER),
                         as_int(header.get("end"), "offsets answer 'end'", ANSWER),
                         avg)


__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetsAnswer",
    "OffsetsRequest",
    "encode_offsets_answer",
    "encode_offsets_request",
    "parse_offsets_answer",
    "parse_offsets_request",
]
