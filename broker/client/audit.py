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

from typing import Any, Mapping, NamedTuple

import msgpack

AGENT_STAGE = "agent"
"""The stage the agent writes; a record without ``stage`` is the agent's."""


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
        return {"host": self.host if host is None else host, "topic": self.topic,
                "window_start": self.window_start, "window_end": self.window_end,
                "sent": self.sent, "acked": self.acked, "stage": self.stage}

    def encode(self, host: str | None = None) -> bytes:
        """The message value: :meth:`to_map` as msgpack."""
        packed: bytes = msgpack.packb(self.to_map(host))
        return packed

    @classmethod
    def from_map(cls, record: Mapping[str, Any]) -> "AuditRecord":
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
    def decode(cls, value: bytes) -> "AuditRecord | None":
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


__all__ = ["AGENT_STAGE", "AuditRecord", "WindowCounts", "window_of"]
