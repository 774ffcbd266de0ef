"""The audit record (the paper, section 5): one schema for every stage that writes or reads it.

A producing stage (the agent) publishes, to the audit topic, one msgpack map per host,
topic and time window::

    {"host": str, "topic": str, "window_start": ms, "window_end": ms,
     "sent": int, "acked": int, "stage": "agent"}

``sent`` messages were handed to the producer and ``acked`` of them were acknowledged
by a broker. Windows are aligned to the epoch (:func:`window_of`), and a message
belongs to the window holding its timestamp, so every later stage (the loader, the
demo) can count what it got for the same windows and report completeness. Records of
one (host, topic, window) add up: an agent restarted inside a window publishes it
twice, with disjoint counts. The agent's docs (docs/agent.md, "Audit") say when a
window's record is due.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgpack

from broker.common.errors import CorruptBatchError
from broker.wire.records import BATCH_HEADER, message_time_deltas

AGENT_STAGE = "agent"
"""The stage the agent writes; a record without ``stage`` is the agent's."""
MIRROR_STAGE = "mirror"
"""The stage a mirror writes to its target cluster's audit topic: what it copied there."""
LANDED_STAGE = "landed"
"""The loader's tier: rows in the lake (counted from the lake, not published)."""
STAGE_ORDER = (AGENT_STAGE, MIRROR_STAGE, LANDED_STAGE)
"""The tiers in pipeline order; completeness of a tier is against the one before it."""


def stage_rank(stage: str) -> tuple[int, str]:
    """Sort key putting stages in pipeline order (unknown stages last, by name)."""
    return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), stage)


def batch_timestamp(raw: bytes | bytearray | memoryview) -> int:
    """The base timestamp (ms) of a stored batch, read from its header (no decoding).

    Not a window for the whole batch: its messages may straddle a window boundary
    (:func:`batch_windows` counts each in its own).
    """
    return int(BATCH_HEADER.unpack_from(raw)[5])


def batch_windows(raw: bytes | bytearray | memoryview, window_ms: int) -> list[tuple[int, int]]:
    """``[(window start, messages)]`` of a stored batch, each message in the window of
    its own timestamp (event time, as Chaperone buckets), oldest window first.

    A stage that counts whole batches (the mirror) uses this so that a batch whose
    messages straddle a window boundary (a producer's batch holding lines read either
    side of it) adds to each window what the producing stage counted there: the tiers
    then agree window by window, not only over their sum. The keys and values are not
    built (:func:`broker.wire.records.message_time_deltas`); a batch that cannot be read
    counts whole in its first message's window.
    """
    header = BATCH_HEADER.unpack_from(raw)
    count, base = int(header[4]), int(header[5])
    first = window_of(base, window_ms)
    if count <= 1:
        return [(first, count)]
    try:
        base, deltas = message_time_deltas(raw)
    except CorruptBatchError:
        return [(first, count)]
    if deltas is None or window_of(base + min(deltas), window_ms) == window_of(base + max(deltas), window_ms):
        return [(window_of(base + (deltas[0] if deltas else 0), window_ms), count)]  # the usual case
    counts: dict[int, int] = {}
    for delta in deltas:  # a batch straddling a boundary: per message
        ms = base + delta
        w = ms - ms % window_ms
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts.items())


def window_of(time_ms: int, window_ms: int) -> int:
    """Start (ms since the epoch) of the epoch-aligned window holding ``time_ms``."""
    return time_ms - time_ms % window_ms


def _is_int(value: Any) -> bool:
    return type(value) is int


class AuditRecord(NamedTuple):
    """Counts of one topic for one window, as published on the audit topic."""

    topic: str
    window_start: int
    """Window start, ms since the epoch (inclusive)."""
    window_end: int
    """Window end, ms since the epoch (exclusive)."""
    sent: int
    """Messages handed to the producer."""
    acked: int
    """Of those, messages a broker acknowledged."""
    host: str = ""
    """The publishing host (the agent fills it in when it publishes)."""
    stage: str = AGENT_STAGE
    """Which stage counted (``agent``)."""

    def to_map(self, host: str | None = None) -> dict[str, object]:
        """The map published on the audit topic; ``host`` overrides the record's own."""
        return {
            "host": self.host if host is None else host,
            "topic": self.topic,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "sent": self.sent,
            "acked": self.acked,
            "stage": self.stage,
        }

    def encode(self, host: str | None = None) -> bytes:
        """The message value: :meth:`to_map` as msgpack."""
        packed: bytes = msgpack.packb(self.to_map(host))
        return packed

    @classmethod
    def from_map(cls, record: Mapping[str, Any]) -> AuditRecord:
        """Validate a decoded map; ValueError names what is wrong.

        ``host`` defaults to ``""`` and ``stage`` to ``"agent"`` (the first records
        carried neither); every other field must be there with its type.
        """
        if not isinstance(record, Mapping):
            raise ValueError(f"an audit record is a map, not {type(record).__name__}")
        try:
            topic, start, end = record["topic"], record["window_start"], record["window_end"]
            sent, acked = record["sent"], record["acked"]
        except KeyError as exc:
            raise ValueError(f"audit record without {exc.args[0]!r}") from None
        host, stage = record.get("host", ""), record.get("stage", AGENT_STAGE)
        if not (isinstance(topic, str) and isinstance(host, str) and isinstance(stage, str)):
            raise ValueError("audit record: topic, host and stage must be strings")
        if not all(_is_int(v) for v in (start, end, sent, acked)):
            raise ValueError("audit record: window_start, window_end, sent and acked must be integers")
        return cls(topic, start, end, sent, acked, host, stage)

    @classmethod
    def decode(cls, value: bytes) -> AuditRecord | None:
        """Parse a message value; None when it is not an audit record."""
        try:
            return cls.from_map(msgpack.unpackb(value, raw=False))
        except (ValueError, TypeError, msgpack.UnpackException):
            return None


class WindowCounts(NamedTuple):
    """One topic and window as a later stage sees it: the audit's one formula.

    ``expected`` is what a tier's audit records count (the agents' ``acked``), None
    without a record. ``landed`` is the rows that stage holds, each record once;
    ``duplicates`` the rows it received and dropped (or found) as copies of records it
    holds. A copy the agent sent again is in ``expected`` too (an agent counts what it
    re-sends), so what arrived is ``landed + duplicates``: ``missing`` is what the
    tier counted and never arrived, ``extra`` what arrived beyond the count (copies the
    tier did not count, such as a mirror's). ``completeness`` = arrived / expected, the
    same figure as before dedup existed (rows landed, copies included).
    """

    expected: int | None
    landed: int
    duplicates: int = 0

    @property
    def arrived(self) -> int:
        return self.landed + self.duplicates

    @property
    def missing(self) -> int | None:
        """Counted by the tier, not arrived (None without an expectation)."""
        return None if self.expected is None else max(0, self.expected - self.arrived)

    @property
    def extra(self) -> int | None:
        """Arrived beyond the tier's count (None without an expectation)."""
        return None if self.expected is None else max(0, self.arrived - self.expected)

    @property
    def completeness(self) -> float | None:
        """arrived / expected, or None without an expectation (or expected == 0)."""
        if not self.expected:
            return None
        return self.arrived / self.expected


class AuditLedger:
    """Sans-IO counts of sent and acked messages per (topic, window), and which are final.

    A producing stage (the agent, the mirror) calls :meth:`sent` when a chunk of messages
    of one window goes to its producer and :meth:`finished` when that chunk was
    acknowledged or failed. A window's record is due once the window ended and none of
    its chunks is unfinished (docs/agent.md, "Audit").
    """

    __slots__ = ("window_ms", "stage", "_counts")

    def __init__(self, window_ms: int, stage: str = AGENT_STAGE):
        if window_ms <= 0:
            raise ValueError("window_ms must be positive")
        self.window_ms = window_ms
        self.stage = stage
        # (topic, window start) -> [sent, acked, unfinished chunks]
        self._counts: dict[tuple[str, int], list[int]] = {}

    def sent(self, topic: str, window: int, count: int) -> None:
        """A chunk of ``count`` messages of ``window`` went to the producer."""
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
        every window, ended or not: a stage that starts again in the same window
        publishes a second record for it, and readers add records up.
        """
        ready: list[AuditRecord] = []
        for (topic, window), (sent, acked, unfinished) in list(self._counts.items()):
            if final or (unfinished == 0 and window + self.window_ms <= now_ms):
                del self._counts[(topic, window)]
                ready.append(AuditRecord(topic, window, window + self.window_ms, sent, acked, stage=self.stage))
        ready.sort(key=lambda r: (r.window_start, r.topic))
        return ready

    def open_windows(self) -> int:
        """How many (topic, window) pairs are still counting."""
        return len(self._counts)


__all__ = [
    "AGENT_STAGE",
    "AuditLedger",
    "AuditRecord",
    "LANDED_STAGE",
    "MIRROR_STAGE",
    "STAGE_ORDER",
    "WindowCounts",
    "batch_timestamp",
    "batch_windows",
    "stage_rank",
    "window_of",
]
