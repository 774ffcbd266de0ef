"""Sans-IO line splitting: bytes of a file in, lines with their byte offsets out.

A :class:`LineSplitter` is fed the bytes of one file in order, in chunks of any size,
and returns the complete lines they finish. It knows three rules and nothing about
files, clocks or sockets, so every byte sequence can be tested without IO:

* A line ends at ``\\n``; the newline (and a ``\\r`` before it) is not part of the
  line. The offset of a line is the file offset of its first byte.
* A last line without its newline is *held* until a later feed completes it, or the
  caller decides the file has been idle long enough and calls :meth:`flush`.
* A line longer than ``max_line_bytes`` is cut into pieces of at most that size (the
  cut moves back to a UTF-8 character boundary when one is near), so a huge line
  never stalls the file and memory stays bounded. Every piece but the last is flagged
  ``cut``: the line continues in the next message.

``held_from`` is the offset of the first byte not yet returned in a line: everything
before it has been handed out, everything from it on will be again after a restart.
That is the offset a checkpoint may advance to once the lines before it are
acknowledged.
"""

from __future__ import annotations

from itertools import accumulate
from operator import add
from typing import NamedTuple


class Lines(NamedTuple):
    """Complete lines as columns (parallel lists), cheap to build and to iterate."""

    lines: list[bytes]
    """The line bytes without ``\\n`` or ``\\r\\n``."""
    offsets: list[int]
    """File offset of each line's first byte."""
    cut: frozenset[int]
    """Indexes of lines that are pieces of a longer line and continue in the next one."""
    end: int
    """File offset just after the last byte these lines cover (their last newline)."""


_NO_CUT: frozenset[int] = frozenset()


def utf8_cut(data: bytes | memoryview, limit: int) -> int:
    """Where to cut ``data`` to at most ``limit`` bytes without splitting a character.

    Moves back over at most three UTF-8 continuation bytes (``10xxxxxx``); if the
    bytes are not UTF-8 at all the cut stays at ``limit``.
    """
    cut = limit
    for _ in range(3):
        if cut <= 0 or cut >= len(data) or (data[cut] & 0xC0) != 0x80:
            break
        cut -= 1
    if cut <= 0 or (cut < len(data) and (data[cut] & 0xC0) == 0x80):
        return limit
    return cut


class LineSplitter:
    """Splits one file's byte stream into lines; see the module docstring."""

    __slots__ = ("max_line_bytes", "_pending", "_pending_offset", "_cutting", "lines_cut")

    def __init__(self, max_line_bytes: int, offset: int = 0):
        if max_line_bytes < 4:
            raise ValueError("max_line_bytes must be at least 4")
        self.max_line_bytes = max_line_bytes
        self._pending = b""
        self._pending_offset = offset
        self._cutting = False  # the held bytes continue a line already cut
        self.lines_cut = 0  # long lines cut so far (each counted once, however many pieces)

    @property
    def held_from(self) -> int:
        """Offset of the first byte not yet returned in a line."""
        return self._pending_offset

    @property
    def held_bytes(self) -> int:
        """How many bytes of an unfinished line are held (at most ``max_line_bytes``)."""
        return len(self._pending)

    def reset(self, offset: int) -> None:
        """Forget held bytes and expect the next feed to start at ``offset``."""
        self._pending = b""
        self._pending_offset = offset
        self._cutting = False

    def feed(self, data: bytes) -> Lines:
        """Take the next bytes of the file; return the lines they complete."""
        base = self._pending_offset
        buf = self._pending + data if self._pending else data
        parts = buf.split(b"\n")
        tail = parts.pop()
        limit = self.max_line_bytes
        if not parts:
            lines: list[bytes] = []
            offsets: list[int] = []
            cut = _NO_CUT
            end = base
        elif len(buf) <= limit or max(map(len, parts)) <= limit:
            # Fast path: offsets are running sums of (length + 1), all in C.
            offsets = list(map(add, accumulate(map(len, parts), initial=base), range(len(parts) + 1)))
            end = offsets.pop()
            cut = _NO_CUT
            lines = parts
            if b"\r" in buf:
                lines = [p[:-1] if p[-1:] == b"\r" else p for p in parts]
            self._cutting = False
        else:
            lines, offsets, cut, end = self._split_long(parts, base)
        if len(tail) > limit:
            pieces, piece_offsets, held = self._cut(tail, end)
            first = len(lines)
            cut = cut | frozenset(range(first, first + len(pieces)))
            lines.extend(pieces)
            offsets.extend(piece_offsets)
            tail = tail[held - end :]
            end = held
        self._pending = tail
        self._pending_offset = end
        return Lines(lines, offsets, cut, end)

    def flush(self) -> Lines:
        """Return the held unfinished line as a line of its own (the file went idle)."""
        offset = self._pending_offset
        line = self._pending
        if not line:
            return Lines([], [], _NO_CUT, offset)
        self._pending_offset += len(line)
        self._pending = b""
        self._cutting = False
        if line[-1:] == b"\r":
            line = line[:-1]
        return Lines([line], [offset], _NO_CUT, self._pending_offset)

    def _split_long(self, parts: list[bytes], base: int) -> tuple[list[bytes], list[int], frozenset[int], int]:
        """Lines where some are longer than the limit: cut those, flag the pieces."""
        lines: list[bytes] = []
        offsets: list[int] = []
        cut: set[int] = set()
        offset = base
        limit = self.max_line_bytes
        for part in parts:
            if part[-1:] == b"\r":
                part_len = len(part)
                part = part[:-1]
            else:
                part_len = len(part)
            if len(part) > limit:
                if not self._cutting:
                    self.lines_cut += 1
                view = memoryview(part)
                start = 0
                while len(part) - start > limit:
                    size = utf8_cut(view[start:], limit)
                    cut.add(len(lines))
                    lines.append(part[start : start + size])
                    offsets.append(offset + start)
                    start += size
                lines.append(part[start:])
                offsets.append(offset + start)
            else:
                lines.append(part)
                offsets.append(offset)
            self._cutting = False
            offset += part_len + 1
        return lines, offsets, frozenset(cut), offset

    def _cut(self, tail: bytes, offset: int) -> tuple[list[bytes], list[int], int]:
        """Cut pieces off an unfinished line longer than the limit.

        Keeps at most ``max_line_bytes`` held; returns the pieces, their offsets and the
        offset of the first byte still held.
        """
        if not self._cutting:
            self.lines_cut += 1
            self._cutting = True
        pieces: list[bytes] = []
        offsets: list[int] = []
        limit = self.max_line_bytes
        view = memoryview(tail)
        start = 0
        while len(tail) - start > limit:
            size = utf8_cut(view[start:], limit)
            pieces.append(tail[start : start + size])
            offsets.append(offset + start)
            start += size
        return pieces, offsets, offset + start
