"""The Kafka Produce answer, packed directly: the one answer on the produce hot path.

kio's generic writer builds the answer as nested entities and writes it field by
field with a type check per value: about 30 us of the broker's CPU per answer at v9
(8 to build, 22 to write), a tenth of what a produce request of 60 small records costs
the broker in all. The answer's shape is fixed (a topic, its partitions, an error code
and an offset each), so it is packed here with ``struct``, byte for byte what kio writes
for the versions served (3 to 9: tests/unit/test_produce_response.py compares the two
on generated answers). Sans-IO: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

PartitionAnswer = tuple[int, int, int, str | None]
"""(partition index, error code, base offset, error message or None)."""
TopicAnswers = tuple[str, Sequence[PartitionAnswer]]

VERSIONS = range(3, 10)
"""The Produce versions this encoder writes (those the Kafka listener serves)."""
FLEXIBLE = 9
"""The first flexible version: compact strings and arrays, tagged-field counts."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time (-1)
_PART_V5 = struct.Struct(">ihqqq")  # ... and the log start offset (-1)
_NO_TIME = -1


def encode_produce_response(version: int, correlation_id: int, topics: Sequence[TopicAnswers]) -> bytes:
    """The whole response frame (size, header, body) of a Produce answer at
    ``version``, throttle time 0, no log append time, log start offset -1 and no
    per-record errors, as the Kafka listener answers."""
    if version not in VERSIONS:
        raise ValueError(f"Produce v{version} is not encoded here (served: v3 to v9)")
    flexible = version >= FLEXIBLE
    out = bytearray(8)
    _I32.pack_into(out, 4, correlation_id)
    if flexible:
        out += b"\0"  # the header's tagged fields
    _length(out, len(topics), flexible)
    part, tail = (_PART_V5, (_NO_TIME, -1)) if version >= 5 else (_PART_V3, (_NO_TIME,))
    for name, partitions in topics:
        _string(out, name, flexible)
        _length(out, len(partitions), flexible)
        for index, error_code, base_offset, message in partitions:
            out += part.pack(index, error_code, base_offset, *tail)
            if version >= 8:
                _length(out, 0, flexible)  # record_errors
                _nullable_string(out, message, flexible)
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    out += b"\0\0\0\0"  # throttle time
    if flexible:
        out += b"\0"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _length(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        _uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    if flexible:
        _uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def _nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is not None:
        _string(out, value, flexible)
    elif flexible:
        out.append(0)
    else:
        out += _I16.pack(-1)
