"""A response as a list of buffers, so that fetched log bytes are never copied into it.

A Kafka fetch answer is mostly log bytes: the stored record batches, read once from
the segment file. Joining them into one ``bytes`` per answer (and before that into the
``records`` field, and into the encoder's buffer) copied every byte three more times,
per fetch of up to ``max.partition.fetch.bytes``. Instead a ``records`` field may hold
a :class:`Chunks` (views over the buffer read from the log), and
:class:`ChunkWriter` (what the schema encoder writes to) keeps the small fields it is
given in one growing buffer and every large buffer by reference: the answer is a short
list of buffers that the connection hands to the socket with one gathering write.
"""

from __future__ import annotations

from collections.abc import Iterable

Buffer = bytes | bytearray | memoryview

BIG = 16 * 1024
"""Buffers at least this long are kept by reference, smaller ones copied together."""


class Chunks:
    """Several buffers that stand for one ``bytes`` value of ``nbytes`` bytes (``len``
    is what a length-prefixed schema field asks of it)."""

    __slots__ = ("parts", "nbytes")

    def __init__(self, parts: Iterable[Buffer] = ()) -> None:
        self.parts: list[Buffer] = []
        self.nbytes = 0
        for part in parts:
            self.append(part)

    def append(self, part: Buffer) -> None:
        """Add ``part`` at the end (by reference, not copied)."""
        n = len(part) if not isinstance(part, memoryview) else part.nbytes
        if n:
            self.parts.append(part)
            self.nbytes += n

    def __len__(self) -> int:
        return self.nbytes

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


class ChunkWriter:
    """A write-only stream that collects what it is given as a list of buffers: small
    writes copied into one buffer, large ones (and :class:`Chunks`) kept by reference."""

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self._small = bytearray()

    def write(self, data: Buffer | Chunks) -> int:
        """Append ``data``; returns its length, as a stream's ``write`` does."""
        if isinstance(data, Chunks):
            self._flush()
            self.parts.extend(data.parts)
            return data.nbytes
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if n >= BIG:
            self._flush()
            self.parts.append(data)
        else:
            self._small += data
        return n

    def _flush(self) -> None:
        if self._small:
            self.parts.append(self._small)
            self._small = bytearray()

    def getparts(self) -> list[Buffer]:
        """Everything written so far, in order."""
        self._flush()
        return self.parts


def total(parts: Iterable[Buffer]) -> int:
    """The byte length of ``parts`` together."""
    return sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in parts)


__all__ = ["BIG", "Buffer", "ChunkWriter", "Chunks", "total"]
