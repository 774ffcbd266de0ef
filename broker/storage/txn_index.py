"""Kafka transactions in one partition: which are open, which were aborted (sans IO).

Built from the log's transactional batches (:class:`broker.wire.records.TxnInfo`),
per batch, never per message, on the leader and on every follower alike (they append
the same bytes), and rebuilt on load from the producer state snapshot plus the
batches after it (:mod:`broker.storage.producer_snapshots`), so every replica
answers the same after a restart or a leader change. Offsets here are byte offsets
of batches (the log's own addresses); the Kafka listener turns them into message
offsets when it answers.

* **Open** transactions: producer id -> byte offset of its first batch since its
  last marker. The first of them is the partition's first unstable offset: a
  ``read_committed`` consumer is served only below it (the last stable offset).
* **Aborted** transactions: (producer id, first batch, abort marker), kept while
  their marker is in the log (retention drops older ones), so a ``read_committed``
  fetch lists those its range overlaps and the client drops their records.
* **Recent ends** (the last :data:`RECENT_ENDS` markers): if the log is cut below a
  marker (a follower truncating to its new leader), the transaction it ended is open
  again.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from broker.wire.kafka_batch import CONTROL_ABORT
from broker.wire.records import TXN_DATA, TxnInfo

RECENT_ENDS = 1000
"""Markers remembered for truncation (a cut deeper than this many markers back is not
expected: markers are written with acks=all)."""


class AbortedTxn(NamedTuple):
    """One aborted transaction of a producer in the partition."""

    producer_id: int
    first: int
    """Byte offset of its first batch."""
    marker: int
    """Byte offset of its ABORT marker."""


def _marker(aborted: AbortedTxn) -> int:
    return aborted.marker


class _End(NamedTuple):
    producer_id: int
    first: int
    marker: int
    aborted: bool


class TxnIndex:
    """Open and aborted transactions of one partition, by byte offset."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        """Producer id -> byte offset of the first batch of its open transaction."""
        self.aborted: list[AbortedTxn] = []
        """In marker order."""
        self._ends: deque[_End] = deque(maxlen=RECENT_ENDS)

    def record(self, txns: Iterable[TxnInfo], base_offset: int) -> None:
        """Note the transactional batches of a message set appended at ``base_offset``."""
        for txn in txns:
            at = base_offset + txn.position
            pid = txn.producer_id
            if txn.control == TXN_DATA:
                self.open.setdefault(pid, at)
                continue
            first = self.open.pop(pid, None)
            if first is None:  # a marker of a transaction with no data here (or a second marker)
                continue
            aborted = txn.control == CONTROL_ABORT
            if aborted:
                self.aborted.append(AbortedTxn(pid, first, at))
            self._ends.append(_End(pid, first, at, aborted))

    def first_unstable(self) -> int | None:
        """Byte offset of the first batch of the earliest open transaction (None: none open)."""
        return min(self.open.values()) if self.open else None

    def aborted_overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions that hold data in ``[start, end)`` (their marker at or
        after ``start``, their first batch before ``end``), as Kafka lists them in a fetch."""
        i = bisect_left(self.aborted, start, key=_marker)
        return [a for a in self.aborted[i:] if a.first < end]

    def truncate_to(self, offset: int) -> None:
        """The log was cut at ``offset``: forget what lies at or past it; a transaction
        whose marker was cut is open again."""
        self.open = {pid: first for pid, first in self.open.items() if first < offset}
        self.aborted = [a for a in self.aborted if a.marker < offset]
        kept: deque[_End] = deque(maxlen=RECENT_ENDS)
        for end in self._ends:
            if end.marker < offset:
                kept.append(end)
            elif end.first < offset:
                self.open[end.producer_id] = min(end.first, self.open.get(end.producer_id, end.first))
        self._ends = kept

    def expire_before(self, offset: int) -> None:
        """Retention deleted the log below ``offset``: forget aborted transactions whose
        marker lies there (nothing of them can be fetched)."""
        self.aborted = [a for a in self.aborted if a.marker >= offset]

    def __bool__(self) -> bool:
        return bool(self.open or self.aborted or self._ends)

    # -- snapshots (inside the producer state snapshot) -------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Plain data for a snapshot (msgpack)."""
        return {
            "open": [[pid, first] for pid, first in self.open.items()],
            "aborted": [list(a) for a in self.aborted],
            "ends": [list(e) for e in self._ends],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> TxnIndex:
        """The index :meth:`to_state` saved (an empty one for None: a snapshot written
        before transactions)."""
        index = cls()
        if state:
            index.open = {int(pid): int(first) for pid, first in state["open"]}
            index.aborted = [AbortedTxn(int(p), int(f), int(m)) for p, f, m in state["aborted"]]
            index._ends.extend(_End(int(p), int(f), int(m), bool(a)) for p, f, m, a in state["ends"])
        return index


__all__ = ["AbortedTxn", "RECENT_ENDS", "TxnIndex"]
