"""A consumer group's health from its commits, by Burrow's rules (no thresholds to tune).

LinkedIn's Burrow judges a partition of a group from a sliding *window* of its
commits rather than from a lag threshold: each commit is an :class:`Observation`
(committed offset, the lag at that moment by :func:`.lag.group_lag`, and when it was
committed). Sans-IO: callers (``logferry group describe --window``, the console)
collect the observations; this module only judges them.

Per partition, once the current lag is above zero (a partition that caught up is OK):

1. **STOP**: the time since the newest commit is longer than the window spans (first
   to newest commit): the consumer stopped committing while data waits. Judged first,
   as Burrow does, so a consumer that died after catching up is still noticed.
2. Then, if any lag in the window was zero (the consumer caught up at some point of
   the window), **OK**. Otherwise:
3. **REWIND**: a commit went backwards (someone seeked the group, or a member
   resumed from an older position).
4. **STALL**: the consumer commits, but the offset never moved over the window.
5. **WARN**: the offset moves, but the lag never fell between two commits (the
   consumer keeps up too slowly).
6. Otherwise **OK** (the lag fell at least once).

A logferry consumer commits only positions that moved, so a consumer that stops
making progress stops committing: it shows as STOP rather than STALL (STALL needs a
committer that re-commits the same offset, as Kafka's consumers do).

A window needs two commits to be judged (one commit has no span, which would read as
STOP at once); with fewer it is OK and ``complete`` says how full it is. A group's
status is the worst of its partitions': OK < WARN < REWIND < STALL < STOP.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

OK = "OK"
WARN = "WARN"
REWIND = "REWIND"
STALL = "STALL"
STOP = "STOP"

SEVERITY = {OK: 0, WARN: 1, REWIND: 2, STALL: 3, STOP: 4}
"""Worse is larger; a group shows its worst partition's status."""

DEFAULT_WINDOW = 10
"""Commits kept per partition (Burrow's ``intervals`` default)."""


class Observation(NamedTuple):
    """One commit of one partition, as a status window holds it."""

    offset: int
    """The committed offset."""
    lag: int
    """Lag in bytes when it was seen (:func:`broker.client.group_lag`)."""
    time_ms: int
    """When it was committed (ms since the epoch; the znode's ``time``)."""


class PartitionStatus(NamedTuple):
    """The verdict on one partition's window."""

    status: str
    """OK, WARN, REWIND, STALL or STOP."""
    complete: float
    """How full the window is, 0..1 (observations / window size)."""


def partition_status(
    window: Sequence[Observation], now_ms: int, current_lag: int | None = None, size: int = DEFAULT_WINDOW
) -> PartitionStatus:
    """Judge one partition's window of commits (oldest first), as of ``now_ms``.

    ``current_lag`` is the lag right now (log end moved since the newest commit); when
    None the newest observation's lag stands for it.
    """
    window = list(window)[-size:] if size > 0 else list(window)
    complete = min(len(window) / size, 1.0) if size > 0 else 1.0
    if not window:
        return PartitionStatus(OK, complete)
    newest = window[-1]
    lag_now = newest.lag if current_lag is None else current_lag
    if lag_now <= 0 or len(window) < 2:
        return PartitionStatus(OK, complete)
    first = window[0]
    pairs = list(zip(window, window[1:], strict=False))
    if now_ms - newest.time_ms > newest.time_ms - first.time_ms:
        return PartitionStatus(STOP, complete)
    if any(o.lag <= 0 for o in window):
        return PartitionStatus(OK, complete)
    if any(b.offset < a.offset for a, b in pairs):
        return PartitionStatus(REWIND, complete)
    if all(b.offset == a.offset for a, b in pairs):
        return PartitionStatus(STALL, complete)
    if all(b.lag >= a.lag for a, b in pairs):
        return PartitionStatus(WARN, complete)
    return PartitionStatus(OK, complete)


def group_status(statuses: Iterable[str]) -> str:
    """The group's status: the worst of its partitions' (OK when it has none)."""
    return max(statuses, key=SEVERITY.__getitem__, default=OK)


class StatusWindows:
    """Windows of observations per key (``(topic, partition)``), fed by repeated reads.

    A reading adds an observation only when the commit changed (a new ``time`` or
    offset): reading the same commit twice is one commit, as in Burrow, which stores
    commits, not polls.
    """

    def __init__(self, size: int = DEFAULT_WINDOW):
        self.size = size
        self._windows: dict[object, list[Observation]] = {}

    def observe(self, key: object, offset: int, lag: int, time_ms: int) -> None:
        """Record a reading of the committed position of ``key``."""
        window = self._windows.setdefault(key, [])
        if window and window[-1].time_ms == time_ms and window[-1].offset == offset:
            return
        window.append(Observation(offset, lag, time_ms))
        del window[: -self.size]

    def window(self, key: object) -> list[Observation]:
        """The observations of ``key``, oldest first."""
        return list(self._windows.get(key, ()))

    def status(self, key: object, now_ms: int, current_lag: int | None = None) -> PartitionStatus:
        """:func:`partition_status` of ``key``'s window."""
        return partition_status(self._windows.get(key, ()), now_ms, current_lag, self.size)

    def forget(self, keep: Iterable[object]) -> None:
        """Drop the windows of keys not in ``keep`` (deleted groups or topics)."""
        kept = set(keep)
        for key in [k for k in self._windows if k not in kept]:
            del self._windows[key]


__all__ = [
    "DEFAULT_WINDOW",
    "OK",
    "Observation",
    "PartitionStatus",
    "REWIND",
    "SEVERITY",
    "STALL",
    "STOP",
    "StatusWindows",
    "WARN",
    "group_status",
    "partition_status",
]
