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

``at`` may also translate between the two addressings of one log: ``{"byte": N}`` (N a
batch boundary) answers ``offset`` N and ``message``, the message offset of that batch's
first message, as Kafka clients number it; ``{"message": M}`` answers ``offset``, the
byte offset of the batch holding message M, ``skip``, the messages before M in that batch,
and ``message`` M. A dashboard shows native pages with the offsets Kafka clients see. An
older broker refuses either (``at`` not understood): the client then has no message offsets.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.common.names import validate_topic_name
from broker.wire.fields import ANSWER, as_int, header_of, shown

EARLIEST = "earliest"
LATEST = "latest"
BYTE = "byte"
"""``at={"byte": N}``: the message offset of the batch starting at byte N."""
MESSAGE = "message"
"""``at={"message": M}``: the byte offset of the batch holding message M, and the skip."""
MAX_MANY = 100_000
"""Pairs one ``many`` request may ask for."""


class OffsetsRequest(NamedTuple):
    """Which offset of which partition a client asks for."""

    topic: str
    """A legal topic name."""
    partition: int
    """Partition of that topic."""
    at: str | int | tuple[str, int]
    """``"earliest"`` (the first offset), ``"latest"`` (the visible end), a time in
    milliseconds since the epoch (the last batch boundary at or before it), or
    ``(BYTE, N)`` / ``(MESSAGE, M)`` (one addressing into the other)."""
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
    message: int | None = None
    """With ``at`` BYTE or MESSAGE: the message offset at ``offset`` (plus ``skip``)."""
    skip: int | None = None
    """With ``at`` MESSAGE: how many messages of the batch at ``offset`` come before it."""


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
    if type(at) is dict:
        return OffsetsRequest(topic, partition, _parse_position(at))
    if at not in (EARLIEST, LATEST) and type(at) is not int:
        raise InvalidRequestError(
            "offsets 'at' must be 'earliest', 'latest', a time in ms, {'byte': N} or {'message': M}"
        )
    return OffsetsRequest(topic, partition, at)


def _parse_position(at: dict[Any, Any]) -> tuple[str, int]:
    if len(at) != 1:
        raise InvalidRequestError("offsets 'at' as a map must be {'byte': N} or {'message': M}")
    ((kind, value),) = at.items()
    if kind not in (BYTE, MESSAGE) or type(value) is not int or value < 0:
        raise InvalidRequestError("offsets 'at' as a map must be {'byte': N} or {'message': M}, N and M 0 or more")
    return kind, value


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
    at = {request.at[0]: request.at[1]} if isinstance(request.at, tuple) else request.at
    return {"topic": request.topic, "partition": request.partition, "at": at}


def encode_offsets_answer(answer: OffsetsAnswer) -> dict[str, Any]:
    """The header fields of an offsets answer."""
    fields: dict[str, Any] = {
        "offset": answer.offset,
        "start": answer.start,
        "end": answer.end,
        "avg_message_bytes": answer.avg_message_bytes,
    }
    if answer.message is not None:
        fields["message"] = answer.message
    if answer.skip is not None:
        fields["skip"] = answer.skip
    return fields


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
        _optional_int(header, "message"),
        _optional_int(header, "skip"),
    )


def _optional_int(header: dict[str, Any], key: str) -> int | None:
    value = header.get(key)
    return None if value is None else as_int(value, f"offsets answer {key!r}", ANSWER)


__all__ = [
    "BYTE",
    "EARLIEST",
    "MESSAGE",
    "LATEST",
    "OffsetsAnswer",
    "OffsetsRequest",
    "encode_offsets_answer",
    "encode_offsets_request",
    "parse_offsets_answer",
    "parse_offsets_request",
]
