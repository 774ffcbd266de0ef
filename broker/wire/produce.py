"""The produce api (key 0), typed: what a producer sends and what the broker answers.

Request header fields: ``acks`` (0, 1 or -1 for all) and ``parts``, a list of
``[topic, partition, nbytes]``; the frame's payload is every part's message set, in
order. Optional ``copies``: indexes of parts whose batches were copied from elsewhere
(an idempotent producer's batches there are deduplicated, but a gap in their
sequences is not refused: a copy may start anywhere or skip what retention deleted).
Answer: ``parts``, a list of ``[topic, partition, err, base_offset, msg]``
(none at all with acks 0).

A malformed part ends the request: the parts before it are applied and answered, the
malformed one is answered with error 4, and the rest are not looked at. That is why
:func:`parse_produce_request` returns the well-formed leading parts plus the
:class:`RejectedPart`, instead of raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.wire.fields import ANSWER, as_int, as_list, as_opt_int, header_of, shown

ACKS = (0, 1, -1)
"""0: no answer; 1: after the leader's append; -1: after every in-sync replica's."""


class ProducePart(NamedTuple):
    """One part of a produce request header: which partition and how many bytes."""

    topic: str
    """Topic to append to."""
    partition: int
    """Partition of that topic."""
    nbytes: int
    """Length of this part's message set in the frame payload."""


class MessageSet(NamedTuple):
    """A well-formed produce part with its bytes, as the broker receives it."""

    topic: str
    """Topic to append to (its name is checked when the partition is looked up)."""
    partition: int
    """Partition of that topic."""
    data: memoryview
    """The message set: whole batches, CRCs not yet checked."""


class RejectedPart(NamedTuple):
    """The first malformed part of a produce request, answered with its error."""

    topic: Any
    """The part's topic as sent (nil when the part was not even a list)."""
    partition: Any
    """The part's partition as sent (nil likewise)."""
    error: InvalidRequestError
    """What is wrong with it."""


class ProduceRequest(NamedTuple):
    """A parsed produce request."""

    acks: int
    """0, 1 or -1 (all); see :data:`ACKS`."""
    sets: list[MessageSet]
    """The well-formed parts, in order, up to the first malformed one."""
    rejected: RejectedPart | None
    """The first malformed part, or None when every part is well formed."""
    copies: frozenset[int] = frozenset()
    """Indexes of parts whose batches are copies made elsewhere (the mirror's
    ``send_raw``): the leader drops batches it holds but refuses no sequence gap."""
    markers: bool = False
    """A transaction coordinator's request (header ``markers``): its parts may hold
    transaction markers (control batches), which the leader refuses from anyone else
    (and from a principal without the brokers' cluster ALTER right)."""


class ProduceAnswerPart(NamedTuple):
    """The broker's answer for one part (packed as the list ``[topic, partition, err,
    base_offset, msg]``)."""

    topic: Any
    """The part's topic, echoed."""
    partition: Any
    """The part's partition, echoed."""
    error: int
    """0, or the error code of :mod:`broker.common.errors` for this part."""
    base_offset: int
    """Offset of the part's first batch; -1 on error."""
    message: str | None
    """Nil on success, else what went wrong."""


def parse_produce_request(header: dict[str, Any], payload: memoryview) -> ProduceRequest:
    """Check a produce request and cut its payload into message sets.

    Raises :class:`InvalidRequestError` when ``acks`` or ``parts`` is wrong (the
    request as a whole is refused); a malformed part becomes :attr:`ProduceRequest.rejected`.
    """
    acks = header_of(header).get("acks", 1)
    parts = header.get("parts")
    if type(acks) is not int or acks not in ACKS or type(parts) is not list:
        raise InvalidRequestError("produce needs acks 0, 1 or -1 (all) and a 'parts' list")
    copied = header.get("copies", [])
    if type(copied) is not list or any(type(i) is not int for i in copied):
        raise InvalidRequestError("produce 'copies' must be a list of part indexes")
    copies = frozenset(copied)
    markers = header.get("markers", False) is True
    sets: list[MessageSet] = []
    pos = 0
    size = len(payload)
    for part in parts:
        if type(part) is not list or len(part) != 3 or type(part[2]) is not int:
            return ProduceRequest(
                acks,
                sets,
                RejectedPart(None, None, InvalidRequestError("each produce part must be [topic, partition, nbytes]")),
                copies,
                markers,
            )
        topic, partition, nbytes = part
        if nbytes < 0 or pos + nbytes > size:
            return ProduceRequest(
                acks,
                sets,
                RejectedPart(
                    topic,
                    partition,
                    InvalidRequestError(f"part claims {nbytes} bytes but the payload has {size - pos} left"),
                ),
                copies,
                markers,
            )
        if type(topic) is not str or type(partition) is not int:
            return ProduceRequest(
                acks,
                sets,
                RejectedPart(topic, partition, InvalidRequestError("topic must be a string and partition an integer")),
                copies,
                markers,
            )
        sets.append(MessageSet(topic, partition, payload[pos : pos + nbytes]))
        pos += nbytes
    return ProduceRequest(acks, sets, None, copies, markers)


def encode_produce_request(
    acks: int, parts: Sequence[ProducePart], copies: Sequence[int] = (), markers: bool = False
) -> dict[str, Any]:
    """The header fields of a produce request; the payload is the parts' message sets.
    ``copies``: indexes of parts made of copied batches (see :attr:`ProduceRequest.copies`);
    ``markers``: a transaction coordinator's markers (:attr:`ProduceRequest.markers`)."""
    fields: dict[str, Any] = {"acks": acks, "parts": [[p.topic, p.partition, p.nbytes] for p in parts]}
    if copies:
        fields["copies"] = list(copies)
    if markers:
        fields["markers"] = True
    return fields


def encode_produce_answer(parts: Sequence[ProduceAnswerPart]) -> dict[str, Any]:
    """The header fields of a produce answer (NamedTuples pack as msgpack arrays)."""
    return {"parts": parts}


def parse_produce_answer(header: dict[str, Any]) -> list[ProduceAnswerPart]:
    """The parts of a produce answer; ProtocolError if the broker sent something else."""
    raw = as_list(header_of(header, ANSWER).get("parts", []), "produce answer 'parts'", ANSWER)
    out = []
    for part in raw:
        if type(part) is not list or len(part) != 5:
            raise ANSWER(f"a produce answer part must be [topic, partition, err, base_offset, msg], got {shown(part)}")
        topic, partition, err, base, message = part
        as_int(err, "produce answer 'err'", ANSWER)
        as_opt_int(base, "produce answer 'base_offset'", ANSWER)
        if message is not None and type(message) is not str:
            raise ANSWER(f"produce answer 'msg' must be a string or nil, got {shown(message)}")
        out.append(ProduceAnswerPart(topic, partition, err, base, message))
    return out


__all__ = [
    "ACKS",
    "MessageSet",
    "ProduceAnswerPart",
    "ProducePart",
    "ProduceRequest",
    "RejectedPart",
    "encode_produce_answer",
    "encode_produce_request",
    "parse_produce_answer",
    "parse_produce_request",
]
