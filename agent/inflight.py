"""Sans-IO accounting of the bytes the agent has read and not yet had acknowledged.

In flight = the encoded bytes of chunks handed to the producer and not finished, plus
the bytes files hold unsent (a partial line, a multiline message being joined). The
agent stops reading when this reaches ``max_inflight_bytes`` (backpressure: the log
files are the buffer). The main loop (sending, finishing) and the file inventory
(a file restarted or forgotten drops what it held) both change it, through this one
object, which also keeps the ``inflight_bytes_max`` and ``inflight_bytes_cap`` gauges.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Protocol


class Holder(Protocol):
    """A file as seen here: how many of its held bytes are counted in flight."""

    counted_held: int


class InFlight:
    """The in-flight byte count, its cap and its high-water mark."""

    def __init__(self, cap: int, gauges: MutableMapping[str, int]):
        self.cap = cap
        self.bytes = 0
        self._gauges = gauges
        gauges["inflight_bytes_cap"] = cap

    @property
    def room(self) -> int:
        """Bytes that may still be read before the cap (negative when over it)."""
        return self.cap - self.bytes

    def sent(self, nbytes: int) -> None:
        """A chunk of ``nbytes`` encoded bytes went to the producer."""
        self.bytes += nbytes
        self._note_max()

    def finished(self, nbytes: int) -> None:
        """A chunk finished (acknowledged or failed)."""
        self.bytes -= nbytes

    def hold(self, holder: Holder, held: int) -> None:
        """``holder`` now holds ``held`` bytes unsent (0 once flushed, restarted or forgotten)."""
        previous = holder.counted_held
        if held != previous:
            self.bytes += held - previous
            holder.counted_held = held
            self._note_max()

    def _note_max(self) -> None:
        if self.bytes > self._gauges["inflight_bytes_max"]:
            self._gauges["inflight_bytes_max"] = self.bytes


__all__ = ["Holder", "InFlight"]
