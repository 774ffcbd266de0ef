"""The offsets api (key 2), typed: a partition's range, or the offset for a time.

A request may instead carry ``many``: a list of ``[topic, partition]`` pairs (with ``at``
``earliest`` or ``latest``), answered with one range per pair, in order, in the answer's
``many`` (``{"start", "end", "avg_message_bytes", "start_message", "end_message"}``, or
``{"err", "msg"}`` for a pair this broker cannot answer). ``start_message`` and
``end_message`` are the message offsets (the count of messages before them,
:mod:`broker.storage.offset_index`) at ``start`` and ``end``: a dashboard takes message
rates from them instead of estimating from bytes; a broker before message offsets
leaves them out. A dashboard reads every partition a broker leads with one
request per tick instead of one per partition. An older broker refuses such a request
(topic and partition missing): the client then asks partition by partition.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.common.names import validate_topic_name
from broker.wire.fields import ANSWER, as_int, header_of, shown

EARLIEST = "earliest"
LATEST = "latest"
MAX_MANY = 100_000
"""Pairs one ``many`` request may ask for."""


class OffsetsRequest(NamedTuple):
    """Which offset of which partition a client asks for."""

    topic: str
    """A legal topic name."""
    partition: int
    """Partition of that topic."""
    at: str | int
    """``"earliest"`` (the first offset), ``"latest"`` (the visible end) or a time in
    milliseconds since the epoch (the last batch boundary at or before it)."""
    many: tuple[tuple[str, int], ...] | None = None
    """Partitions whose ranges are asked all at once (``topic``/``partition`` unused)."""


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
    many = header_of(header).get("many")
    if many is not None:
        return _parse_many(many, header.get("at", LATEST))
    topic = header.get("topic")
    partition = header.get("partition")
    if type(topic) is not str or type(partition) is not int:
        raise InvalidRequestError("topic must be a string and partition an integer")
    validate_topic_name(topic)
    at = header.get("at", LATEST)
    if at not in (EARLIEST, LATEST) and type(at) is not int:
        raise InvalidRequestError("offsets 'at' must be 'earliest', 'latest' or a time in ms")
    return OffsetsRequest(topic, partition, at)


def _parse_many(many: Any, at: Any) -> OffsetsRequest:
    if type(many) is not list or len(many) > MAX_MANY:
        raise InvalidRequestError(f"offsets 'many' must be a list of at most {MAX_MANY} [topic, partition] pairs")
    pairs = []
    for item in many:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str or type(item[1]) is not int:
            raise InvalidRequestError("offsets 'many' items must be [topic, partition] pairs")
        validate_topic_name(item[0])
        pairs.append((item[0], item[1]))
    if at not in (EARLIEST, LATEST):
        raise InvalidRequestError("offsets 'many' asks for 'earliest' or 'latest' only")
    return OffsetsRequest("", -1, at, tuple(pairs))


def encode_offsets_request(request: OffsetsRequest) -> dict[str, Any]:
    """The header fields of an offsets request."""
    if request.many is not None:
        return {"many": [list(pair) for pair in request.many], "at": request.at}
    return {"topic": request.topic, "partition": request.partition, "at": request.at}


def encode_offsets_answer(answer: OffsetsAnswer) -> dict[str, Any]:
    """The header fields of an offsets answer."""
    return {
        "offset": answer.offset,
        "start": answer.start,
        "end": answer.end,
        "avg_message_bytes": answer.avg_message_bytes,
    }


def parse_offsets_answer(header: dict[str, Any]) -> OffsetsAnswer:
    """An offsets answer; ProtocolError if the broker sent something else."""
    header = header_of(header, ANSWER)
    avg = header.get("avg_message_bytes")
    if avg is not None and type(avg) not in (int, float):
        raise ANSWER(f"offsets answer 'avg_message_bytes' must be a number, got {shown(avg)}")
    return OffsetsAnswer(
        as_int(header.get("offset"), "offsets answer 'offset'", ANSWER),
        as_int(header.get("start"), "offsets answer 'start'", ANSWER),
        as_int(header.get("end"), "offsets answer 'end'", ANSWER),
        avg,
    )


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
