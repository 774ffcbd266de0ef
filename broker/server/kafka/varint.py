"""Kafka's zig-zag varints (protobuf style), as used inside record batches v2: writing.

They are read by :func:`broker.wire.kafka_batch.read_varint` (clients read Kafka-written
batches too, so the reader sits in the wire layer)."""

from __future__ import annotations


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


__all__ = ["varint_size", "write_varint"]
