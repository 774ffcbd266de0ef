"""Sans-IO audit ledger (the paper, section 5): messages sent and acked per topic per window.

Window definition, chosen so that every later stage can recompute it from the
messages alone: a message belongs to the window that contains its **time read**, the
``time`` field of its value (also the message timestamp the agent gives the
producer). Windows are aligned to the epoch: ``window_start = time - time %
window_ms``, ``window_end = window_start + window_ms``.

A window's record is due when the window has ended *and* every chunk sent with a
time read in it has finished (acked or failed); only then are its counts final. The
record then says: ``sent`` messages were handed to the producer, ``acked`` of them
were acknowledged by a broker. A failed chunk is read and sent again later, with a
new time read, so it counts in a later window; the counts of a window never change
after its record is published. See docs/agent.md, "Audit". The record's schema and the
window rule are the client library's (:class:`broker.client.AuditRecord`,
:func:`broker.client.window_of`), shared with every stage that reads the audit topic.
"""

from __future__ import annotations

from broker.client import AuditRecord, window_of


class AuditLedger:
    """Counts per (topic, window) and says which windows are final."""

    __slots__ = ("window_ms", "_counts")

    def __init__(self, window_ms: int):
        if window_ms <= 0:
            raise ValueError("window_ms must be positive")
        self.window_ms = window_ms
        # (topic, window start) -> [sent, acked, unfinished chunks]
        self._counts: dict[tuple[str, int], list[int]] = {}

    def sent(self, topic: str, window: int, count: int) -> None:
        """A chunk of ``count`` messages with a time read in ``window`` went to the producer."""
        entry = self._counts.get((topic, window))
        if entry is None:
            entry = self._counts[(topic, window)] = [0, 0, 0]
        entry[0] += count
        entry[2] += 1

    def finished(self, topic: str, window: int, count: int, ok: bool) -> None:
        """That chunk finished: acknowledged (``ok``) or failed."""
        entry = self._counts[(topic, window)]
        if ok:
            entry[1] += count
        entry[2] -= 1

    def due(self, now_ms: int, final: bool = False) -> list[AuditRecord]:
        """Remove and return the records that are complete.

        A record is complete when its window ended before ``now_ms`` and none of its
        chunks is unfinished. ``final`` (at shutdown, after the last flush) returns
        every window, ended or not: an agent that starts again in the same window
        publishes a second record for it, and readers add records up.
        """
        ready: list[AuditRecord] = []
        for (topic, window), (sent, acked, unfinished) in list(self._counts.items()):
            if final or (unfinished == 0 and window + self.window_ms <= now_ms):
                del self._counts[(topic, window)]
                ready.append(AuditRecord(topic, window, window + self.window_ms, sent, acked))
        ready.sort(key=lambda r: (r.window_start, r.topic))
        return ready

    def open_windows(self) -> int:
        """How many (topic, window) pairs are still counting."""
        return len(self._counts)


__all__ = ["AuditLedger", "AuditRecord", "window_of"]
