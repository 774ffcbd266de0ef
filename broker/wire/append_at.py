"""The append-at api (key 13), typed: append batches at a stated offset, or ask where a log ends.

The offset-preserving mirror copies a source partition into a target partition byte
for byte, so both hold the same batches at the same offsets. It cannot use produce:
a produce appends wherever the log ends, and a retried or repeated produce copies a
batch twice. An append-at part names the offset its first batch must land at
(``expect``); the leader appends the bytes as they are only if its log ends exactly
there, and otherwise appends nothing and answers :class:`OffsetMismatchError` with
its real ends. Repeating a part is then harmless (the second one mismatches), and a
log written by someone else is noticed, never spliced.

Request header fields: ``acks`` (0, 1 or -1, as for produce) and ``parts``, a list of
``[topic, partition, expect, nbytes, start]``; the payload is every part's batches,
in order. ``start`` (bool): the log may be started at ``expect`` if it is empty (a
new target whose source lost its first bytes to retention). A part with ``expect``
-1 and no bytes is a query: nothing is appended and the answer says where the log
starts and ends and which batch ends it.

Answer: ``parts``, a list of ``[topic, partition, err, start, end, last, last_len,
last_crc, msg]``: the log's start and end after the part (on success and on a
mismatch; -1 when unknown), and for a query the offset, length and crc32 of the whole
last batch (its every byte, header included: what a mirror compares with the source's
batch at that offset; -1 when the log is empty). A malformed part ends the request as
for produce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from broker.common.errors import InvalidRequestError
from broker.wire.fields import ANSWER, as_int, as_list, header_of, shown
from broker.wire.produce import ACKS, RejectedPart

QUERY = -1
"""``expect`` of a part that only asks where the log ends."""


class AppendAtPart(NamedTuple):
    """One part of a request, with its bytes (the client's and the broker's view)."""

    topic: str
    partition: int
    expect: int
    """Offset the first batch must land at (the log's end), or :data:`QUERY`."""
    data: bytes | memoryview
    """Whole batches (CRCs checked by the broker); empty for a query."""
    start: bool = False
    """The log may start at ``expect`` if it is empty (see the module docstring)."""


class AppendAtRequest(NamedTuple):
    """A parsed append-at request."""

    acks: int
    parts: list[AppendAtPart]
    """The well-formed parts, in order, up to the first malformed one."""
    rejected: RejectedPart | None


class AppendAtAnswerPart(NamedTuple):
    """The broker's answer for one part (packed as a list, see the module docstring)."""

    topic: Any
    partition: Any
    error: int
    """0, :class:`OffsetMismatchError`'s code, or another error code."""
    start: int
    """The log's first offset (-1 when unknown: the partition is not led here)."""
    end: int
    """The log's end after the part (-1 when unknown)."""
    last: int = -1
    """A query's answer: offset of the log's last batch (-1: empty log)."""
    last_len: int = -1
    """Its length in bytes."""
    last_crc: int = -1
    """crc32 of all its bytes."""
    message: str | None = None


def parse_append_at_request(header: dict[str, Any], payload: memoryview) -> AppendAtRequest:
    """Check an append-at request and cut its payload into parts.

    Raises :class:`InvalidRequestError` when ``acks`` or ``parts`` is wrong; a malformed
    part becomes :attr:`AppendAtRequest.rejected`.
    """
    acks = header_of(header).get("acks", 1)
    parts = header.get("parts")
    if type(acks) is not int or acks not in ACKS or type(parts) is not list:
        raise InvalidRequestError("append_at needs acks 0, 1 or -1 (all) and a 'parts' list")
    out: list[AppendAtPart] = []
    pos = 0
    size = len(payload)
    for part in parts:
        if type(part) is not list or len(part) != 5:
            return AppendAtRequest(
                acks,
                out,
                RejectedPart(
                    None,
                    None,
                    InvalidRequestError("each append_at part must be [topic, partition, expect, nbytes, start]"),
                ),
            )
        topic, partition, expect, nbytes, start = part
        if type(topic) is not str or type(partition) is not int:
            return AppendAtRequest(
                acks,
                out,
                RejectedPart(topic, partition, InvalidRequestError("topic must be a string and partition an integer")),
            )
        if type(expect) is not int or expect < QUERY or type(nbytes) is not int or type(start) is not bool:
            return AppendAtRequest(
                acks,
                out,
                RejectedPart(
                    topic,
                    partition,
                    InvalidRequestError(
                        "expect must be an offset (or -1: a query), nbytes an integer and start a boolean"
                    ),
                ),
            )
        if nbytes < 0 or pos + nbytes > size or (expect == QUERY and nbytes):
            return AppendAtRequest(
                acks,
                out,
                RejectedPart(
                    topic,
                    partition,
                    InvalidRequestError(
                        f"part claims {nbytes} bytes but the payload has {size - pos} left (a query carries none)"
                    ),
                ),
            )
        out.append(AppendAtPart(topic, partition, expect, payload[pos : pos + nbytes], start))
        pos += nbytes
    return AppendAtRequest(acks, out, None)


def encode_append_at_request(acks: int, parts: Sequence[AppendAtPart]) -> dict[str, Any]:
    """The header fields of a request; the payload is the parts' ``data``, in order."""
    return {"acks": acks, "parts": [[p.topic, p.partition, p.expect, len(p.data), p.start] for p in parts]}


def encode_append_at_answer(parts: Sequence[AppendAtAnswerPart]) -> dict[str, Any]:
    """The header fields of an answer (NamedTuples pack as msgpack arrays)."""
    return {"parts": parts}


def parse_append_at_answer(header: dict[str, Any]) -> list[AppendAtAnswerPart]:
    """The parts of an answer; ProtocolError if the broker sent something else."""
    raw = as_list(header_of(header, ANSWER).get("parts", []), "append_at answer 'parts'", ANSWER)
    out = []
    for part in raw:
        if type(part) is not list or len(part) != 9:
            raise ANSWER(
                f"an append_at answer part must be [topic, partition, err, start, end, "
                f"last, last_len, last_crc, msg], got {shown(part)}"
            )
        topic, partition, err, start, end, last, last_len, last_crc, message = part
        for value, what in (
            (err, "err"),
            (start, "start"),
            (end, "end"),
            (last, "last"),
            (last_len, "last_len"),
            (last_crc, "last_crc"),
        ):
            as_int(value, f"append_at answer {what!r}", ANSWER)
        if message is not None and type(message) is not str:
            raise ANSWER(f"append_at answer 'msg' must be a string or nil, got {shown(message)}")
        out.append(AppendAtAnswerPart(topic, partition, err, start, end, last, last_len, last_crc, message))
    return out


__all__ = [
    "QUERY",
    "AppendAtAnswerPart",
    "AppendAtPart",
    "AppendAtRequest",
    "encode_append_at_answer",
    "encode_append_at_request",
    "parse_append_at_answer",
    "parse_append_at_request",
]
