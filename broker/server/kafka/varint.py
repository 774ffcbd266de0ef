"""Kafka's zig-zag varints (protobuf style), as used inside record batches v2."""

from __future__ import annotations

from broker.common.errors import CorruptBatchError


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``pos``; returns ``(value, next position)``.

    Raises CorruptBatchError when the buffer ends inside it or it runs past 10 bytes.
    """
    shift = 0
    raw = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptBatchError("record batch ends inside a varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError("record batch holds a varint longer than 10 bytes")


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zig-zag varint to ``out``."""
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def varint_size(value: int) -> int:
    """How many bytes :func:`write_varint` uses for ``value``."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


__all__ = ["read_varint", "varint_size", "write_varint"]
