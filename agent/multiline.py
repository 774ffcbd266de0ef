"""Sans-IO multiline joining: consecutive lines that belong together become one message.

A rule says which lines *continue* the message before them: either lines that match
``continuation`` (Java stack traces: ``^(\\s|Caused by)``) or lines that do *not*
match ``start`` (``^\\d{4}-\\d\\d-\\d\\d`` when every record starts with a date). The
joiner holds the message being built until a line that starts a new one arrives,
the message would exceed ``max_bytes`` (it is then emitted flagged ``cut`` and the
line starts the next message: nothing is dropped), or the caller decides the file
has been quiet for the flush timeout and calls :meth:`flush`.

``held_from`` is the offset of the first held line: the checkpoint must not pass it,
because a restart has to read those lines again to rebuild the message.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agent.lines import Lines

_NO_CUT: frozenset[int] = frozenset()


class MultilineJoiner:
    """Joins continuation lines onto the line before them; see the module docstring."""

    __slots__ = ("_continues", "max_bytes", "_parts", "_size", "_offset", "_cut", "_end")

    def __init__(
        self,
        continuation: re.Pattern[bytes] | None = None,
        start: re.Pattern[bytes] | None = None,
        max_bytes: int = 1024 * 1024,
    ):
        if (continuation is None) == (start is None):
            raise ValueError("give exactly one of continuation and start")
        self._continues: Callable[[bytes], bool]
        if continuation is not None:
            match = continuation.match
            self._continues = lambda line: match(line) is not None
        else:
            start_match = start.match  # type: ignore[union-attr]
            self._continues = lambda line: start_match(line) is None
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._offset = 0
        self._cut = False  # the held message's last line was itself a cut piece
        self._end = 0

    @property
    def held_from(self) -> int | None:
        """Offset of the first held line, or None when nothing is held."""
        return self._offset if self._parts else None

    @property
    def held_bytes(self) -> int:
        """Bytes of the message being built."""
        return self._size

    def reset(self) -> None:
        """Forget the held message (the file is read again from an earlier offset)."""
        self._parts = []
        self._size = 0
        self._cut = False

    def feed(self, batch: Lines) -> Lines:
        """Take complete lines; return the messages they complete.

        The returned ``end`` is the offset up to which every byte is in a returned
        message: the start of the held message, or ``batch.end`` when none is held.
        """
        out: list[bytes] = []
        offsets: list[int] = []
        cut: set[int] = set()
        continues = self._continues
        parts = self._parts
        pieces = batch.cut
        for index, (line, offset) in enumerate(zip(batch.lines, batch.offsets, strict=True)):
            # A piece of a cut line is always followed by its rest, which must not be
            # mistaken for the start of a new message: treat it as a continuation.
            if parts and (self._cut or continues(line)):
                joined = self._cut  # the rest of a cut line joins without a newline
                if self._size + (not joined) + len(line) <= self.max_bytes:
                    if joined:
                        parts[-1] += line
                    else:
                        parts.append(line)
                    self._size += (not joined) + len(line)
                    self._cut = index in pieces
                    continue
                self._emit(out, offsets, cut, flagged=True)
            elif parts:
                self._emit(out, offsets, cut, flagged=False)
            parts = self._parts = [line]
            self._size = len(line)
            self._offset = offset
            self._cut = index in pieces
        end = self._offset if self._parts else batch.end
        return Lines(out, offsets, frozenset(cut) if cut else _NO_CUT, end)

    def flush(self, end: int) -> Lines:
        """Emit the held message (the file was quiet); ``end`` is the splitter's held_from."""
        out: list[bytes] = []
        offsets: list[int] = []
        cut: set[int] = set()
        if self._parts:
            self._emit(out, offsets, cut, flagged=self._cut)
        return Lines(out, offsets, frozenset(cut) if cut else _NO_CUT, end)

    def _emit(self, out: list[bytes], offsets: list[int], cut: set[int], flagged: bool) -> None:
        if flagged:
            cut.add(len(out))
        out.append(b"\n".join(self._parts) if len(self._parts) > 1 else self._parts[0])
        offsets.append(self._offset)
        self._parts = []
        self._size = 0
        self._cut = False
