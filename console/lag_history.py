"""A short lag history per consumer group: its last readings, for a sparkline and a table (sans IO).

The group's status is Burrow's, judged per partition over a window of its commits
(:mod:`broker.client.group.status`); one reading's status says where the group stands,
not how it got there. The history keeps, per group, the last :data:`SIZE` readings of
its lag (messages, bytes, time) and status, and since when the status has been what it
is now, so the page shows a lag that grows (WARN), a consumer that stopped committing
(STOP) or one that commits without moving (STALL) as a trend, and for how long.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

SIZE = 60
"""Readings kept per group (a minute at the default interval)."""


class LagReading(NamedTuple):
    """One reading of one group."""

    time_ms: int
    """When the reading began (ms since the epoch)."""
    lag_messages: int
    """The group's lag in messages (summed over its partitions)."""
    lag_bytes: int
    """The group's lag in bytes."""
    lag_s: float | None
    """The age of its oldest unread message (None: unknown)."""
    status: str
    """The group's status at that reading (OK, WARN, REWIND, STALL, STOP)."""


class LagHistory:
    """The last ``size`` :class:`LagReading` of each group, and since when its status holds."""

    def __init__(self, size: int = SIZE):
        self.size = size
        self._readings: dict[str, deque[LagReading]] = {}
        self._since: dict[str, tuple[str, int]] = {}
        """group -> (status, the first reading of the run of readings with that status)."""

    def add(self, group: str, reading: LagReading) -> None:
        """Record a reading; a reading no newer than the last one is ignored."""
        readings = self._readings.setdefault(group, deque(maxlen=self.size))
        if readings and reading.time_ms <= readings[-1].time_ms:
            return
        readings.append(reading)
        status, _ = self._since.get(group, ("", 0))
        if status != reading.status:
            self._since[group] = (reading.status, reading.time_ms)

    def status_since_ms(self, group: str) -> int | None:
        """When the group's current status began: the first reading of the present run of
        equal statuses (it may have begun before the oldest reading kept); None if unknown."""
        found = self._since.get(group)
        return found[1] if found else None

    def view(self, group: str) -> dict[str, Any]:
        """The page's history of ``group``: parallel lists, oldest first (JSON-able), and
        ``status_since_ms``."""
        readings = list(self._readings.get(group, ()))
        return {
            "t": [r.time_ms for r in readings],
            "lag_messages": [r.lag_messages for r in readings],
            "lag_bytes": [r.lag_bytes for r in readings],
            "lag_s": [r.lag_s for r in readings],
            "status": [r.status for r in readings],
            "status_since_ms": self.status_since_ms(group),
        }

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the groups not in ``keep`` (deleted ones)."""
        kept = set(keep)
        for group in [g for g in self._readings if g not in kept]:
            del self._readings[group]
            self._since.pop(group, None)


__all__ = ["SIZE", "LagHistory", "LagReading"]
