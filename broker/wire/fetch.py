"""The fetch api (key 1), typed: consumers' fetches and followers' replica fetches.

Request header fields: ``parts``, a list of ``[topic, partition, offset, max_bytes]``,
``max_wait_ms`` and ``min_bytes`` (long polling). A follower adds ``replica`` (its
broker id) and a fifth field per part, the leader epoch it follows.

Answer: ``parts``, a list of ``[topic, partition, err, msg, start, visible_end,
nbytes]``, eight fields for a follower (``log_end`` last); the frame's payload holds
each part's ``nbytes`` of log bytes, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.wire.fields import ANSWER, as_int, as_list, as_number, header_of, shown

MAX_WAIT_MS = 30_000
"""The longest a fetch is held; larger ``max_wait_ms`` values are cut to this."""


class FetchPart(NamedTuple):
    """One partition a consumer fetches."""

    topic: str
    """Topic to read (its name is checked when the partition is looked up)."""
    partition: int
    """Partition of that topic."""
    offset: int
    """Where to read from: a batch boundary."""
    max_bytes: int
    """How many bytes at most (at least one whole batch is sent anyway)."""


class ReplicaFetchPart(NamedTuple):
    """One partition a follower copies from its leader."""

    topic: str
    """Topic to read."""
    partition: int
    """Partition of that topic."""
    offset: int
    """The follower's log end: where to read from."""
    max_bytes: int
    """How many bytes at most (at least one whole batch is sent anyway)."""
    leader_epoch: int
    """The leader epoch the follower follows; another epoch is refused (error 20)."""


AnyFetchPart = FetchPart | ReplicaFetchPart


class FetchRequest(NamedTuple):
    """A parsed fetch request, its waits already clamped to what the broker allows."""

    parts: list[AnyFetchPart]
    """What to read: :class:`ReplicaFetchPart` exactly when ``replica`` is set, else
    :class:`FetchPart`."""
    max_wait_ms: int
    """How long to hold the request for ``min_bytes``: 0 to :data:`MAX_WAIT_MS`."""
    min_bytes: int
    """Answer once this many bytes are readable over all parts (at least 1)."""
    replica: int | None
    """The fetching follower's broker id; None for a consumer."""


class FetchAnswerPart(NamedTuple):
    """The answer for one consumer part (packed as the list ``[topic, partition, err,
    msg, start, visible_end, nbytes]``)."""

    topic: Any
    """The part's topic, echoed."""
    partition: Any
    """The part's partition, echoed."""
    error: int
    """0, or the error code for this part."""
    message: str | None
    """Nil on success, else what went wrong."""
    start: int | None
    """The partition's first offset (nil when unknown, e.g. an unknown topic)."""
    visible_end: int | None
    """The partition's visible end (high watermark); nil when unknown."""
    nbytes: int
    """How many log bytes of the payload belong to this part."""


class ReplicaFetchAnswerPart(NamedTuple):
    """The answer for one follower part: a consumer's seven fields plus ``log_end``, and
    ``start_message`` and ``start_batch_message`` when the leader's log starts inside a
    segment."""

    topic: Any
    """The part's topic, echoed."""
    partition: Any
    """The part's partition, echoed."""
    error: int
    """0, or the error code for this part."""
    message: str | None
    """Nil on success, else what went wrong."""
    start: int | None
    """The leader's first offset (nil when unknown)."""
    visible_end: int | None
    """The leader's high watermark (nil when unknown)."""
    nbytes: int
    """How many log bytes of the payload belong to this part."""
    log_end: int | None
    """The leader's log end (nil when the leader hosts no such partition)."""
    start_message: int | None = None
    """The message offset of the leader's first kept message when records were deleted
    up to it (Kafka's DeleteRecords: ``start`` is then the batch holding it), so the
    follower hides the same records; absent (an 8-field part) otherwise, which is what
    brokers before it send and read."""
    start_batch_message: int | None = None
    """With ``start_message``: the message offset of the first message of the batch at
    ``start``, where a follower that restarts its log empty at ``start`` counts from."""


AnyFetchAnswerPart = FetchAnswerPart | ReplicaFetchAnswerPart


def parse_fetch_request(header: dict[str, Any]) -> FetchRequest:
    """Check a fetch request; raises :class:`InvalidRequestError` naming the bad field."""
    parts = header_of(header).get("parts")
    if type(parts) is not list:
        raise InvalidRequestError(f"field 'parts' must be list, got {shown(parts)}")
    max_wait = as_number(header.get("max_wait_ms"), "fetch 'max_wait_ms'", 0)
    min_bytes = as_number(header.get("min_bytes"), "fetch 'min_bytes'", 1)
    replica = header.get("replica")
    if replica is not None and type(replica) is not int:
        raise InvalidRequestError("fetch 'replica' must be a broker id")
    size = 4 if replica is None else 5
    make = FetchPart._make if replica is None else ReplicaFetchPart._make
    typed: list[AnyFetchPart] = []
    for part in parts:
        if (
            type(part) is not list
            or len(part) != size
            or type(part[0]) is not str
            or not all(type(x) is int for x in part[1:])
        ):
            raise InvalidRequestError(
                "each fetch part must be [topic, partition, offset, max_bytes]"
                if size == 4
                else "each replica fetch part must be [topic, partition, offset, max_bytes, leader_epoch]"
            )
        typed.append(make(part))
    return FetchRequest(typed, min(max(max_wait, 0), MAX_WAIT_MS), max(min_bytes, 1), replica)


def encode_fetch_request(
    parts: Sequence[AnyFetchPart], max_wait_ms: int, min_bytes: int, replica: int | None = None
) -> dict[str, Any]:
    """The header fields of a fetch request (a follower's when ``replica`` is given)."""
    fields: dict[str, Any] = {} if replica is None else {"replica": replica}
    fields["max_wait_ms"] = max_wait_ms
    fields["min_bytes"] = min_bytes
    fields["parts"] = [list(p) for p in parts]
    return fields


def encode_fetch_answer(parts: Sequence[AnyFetchAnswerPart]) -> dict[str, Any]:
    """The header fields of a fetch answer (NamedTuples pack as msgpack arrays; a
    follower's part without ``start_message`` as its first 8 fields)."""
    return {"parts": [p[:8] if type(p) is ReplicaFetchAnswerPart and p.start_message is None else p for p in parts]}


def parse_fetch_answer(header: dict[str, Any], replica: bool = False) -> list[Any]:
    """The parts of a fetch answer (:class:`ReplicaFetchAnswerPart` when ``replica``);
    ProtocolError if the broker sent something else."""
    raw = as_list(header_of(header, ANSWER).get("parts", []), "fetch answer 'parts'", ANSWER)
    sizes = (8, 10) if replica else (7,)
    make = ReplicaFetchAnswerPart if replica else FetchAnswerPart
    out = []
    for part in raw:
        if type(part) is not list or len(part) not in sizes:
            raise ANSWER(f"a fetch answer part must have {' or '.join(map(str, sizes))} fields, got {shown(part)}")
        _check_answer_part(part)
        out.append(make(*part))
    return out


def _check_answer_part(part: list[Any]) -> None:
    err, message, start, end, nbytes = part[2:7]
    as_int(err, "fetch answer 'err'", ANSWER)
    if message is not None and type(message) is not str:
        raise ANSWER(f"fetch answer 'msg' must be a string or nil, got {shown(message)}")
    extra = tuple(zip(("log_end", "start_message", "start_batch_message"), part[7:], strict=False))
    for name, value in (("start", start), ("visible_end", end), *extra):
        if value is not None and type(value) is not int:
            raise ANSWER(f"fetch answer '{name}' must be an integer or nil, got {shown(value)}")
    if type(nbytes) is not int or nbytes < 0:
        raise ANSWER(f"fetch answer 'nbytes' must be a count of bytes, got {shown(nbytes)}")


def payload_slices(parts: Sequence[AnyFetchAnswerPart], payload: memoryview) -> list[memoryview]:
    """Each part's log bytes, cut from the answer's payload in order.

    ProtocolError when the parts claim more bytes than the payload holds.
    """
    out = []
    pos = 0
    for part in parts:
        end = pos + part.nbytes
        if end > len(payload):
            raise ANSWER(f"fetch answer parts claim {end} payload bytes, the frame has {len(payload)}")
        out.append(payload[pos:end])
        pos = end
    return out


__all__ = [
    "AnyFetchAnswerPart",
    "AnyFetchPart",
    "FetchAnswerPart",
    "FetchPart",
    "FetchRequest",
    "MAX_WAIT_MS",
    "ReplicaFetchAnswerPart",
    "ReplicaFetchPart",
    "encode_fetch_answer",
    "encode_fetch_request",
    "parse_fetch_answer",
    "parse_fetch_request",
    "payload_slices",
]
