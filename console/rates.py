"""Per-second rates from counters read at intervals, where byte offsets fall in message
counts, and short histories for charts (sans IO).

The console reads ever-growing numbers (a partition's log end in bytes and in messages, a
group's committed offset); a rate is the difference over the time between two readings,
the oldest and newest of a trailing window.
A counter that went backwards (a topic deleted and re-created, a truncated log) gives
no rate for that interval rather than a negative one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

RATE_WINDOW_S = 5.0
"""A rate is the growth over the readings of about the last this many seconds: a reading
taken a little late or early moves it by a fraction of one interval's count over the
whole window, not over one interval."""


class Rates:
    """The per-second rate of each key over a trailing window of :meth:`update` calls."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: dict[Hashable, deque[tuple[float, float]]] = {}
        self._rate: dict[Hashable, float] = {}

    def update(self, key: Hashable, value: float, now: float) -> float:
        """Record ``value`` of ``key`` at ``now`` (seconds); return its rate over the
        window (0 at first; 0 again, from this reading on, if the value went back)."""
        points = self._points.get(key)
        if points is None or (points and (value < points[-1][1] or now <= points[-1][0])):
            points = self._points[key] = deque()
        points.append((now, value))
        while len(points) > 2 and now - points[1][0] >= self.window_s:
            points.popleft()
        first_t, first_v = points[0]
        rate = (value - first_v) / (now - first_t) if now > first_t else 0.0
        self._rate[key] = rate
        return rate

    def window(self, key: Hashable) -> tuple[float, float] | None:
        """(first, last) reading time (seconds) the rate of ``key`` is taken over."""
        points = self._points.get(key)
        return (points[0][0], points[-1][0]) if points and len(points) > 1 else None

    def get(self, key: Hashable) -> float:
        """The latest rate of ``key`` (0 when unknown)."""
        return self._rate.get(key, 0.0)

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop the keys not in ``keep``."""
        kept = set(keep)
        for key in [k for k in self._points if k not in kept]:
            self._points.pop(key, None)
            self._rate.pop(key, None)


class MessagePositions:
    """Where byte offsets fall in message offsets, from the (byte end, message end) pairs
    of a partition's recent readings (sans IO).

    A native consumer commits a byte offset; its lag in messages is the messages between
    that offset and the end. The broker says how many messages lie before each end it
    reports, so a committed offset equal to an end seen earlier gives the lag exactly, and
    one between two seen ends is placed between their counts by its bytes: an estimate
    off by at most the messages of one interval, said so on the page.

    Each pair keeps the time it was first seen, which gives the lag in time too
    (:meth:`behind_s`): how long ago the oldest unread message reached the broker.
    """

    def __init__(self, size: int = 600) -> None:
        self.size = size
        self._seen: dict[Hashable, deque[tuple[int, int, float]]] = {}

    def add(self, key: Hashable, byte_end: int, message_end: int, now: float = 0.0) -> None:
        """Note that ``message_end`` messages lie before byte ``byte_end`` of ``key``, an
        end seen at ``now`` (seconds; kept only the first time this end is seen)."""
        seen = self._seen.get(key)
        if seen is None or (seen and byte_end < seen[-1][0]):  # re-created or truncated
            seen = self._seen[key] = deque(maxlen=self.size)
        if not seen or seen[-1][0] != byte_end:
            seen.append((byte_end, message_end, now))

    def message_at(self, key: Hashable, byte_offset: int) -> tuple[int, bool] | None:
        """(message offset at ``byte_offset``, exact?), or None when it lies before the
        first reading kept (or nothing is known of ``key``)."""
        seen = self._seen.get(key)
        if not seen or byte_offset < seen[0][0]:
            return None
        lo = seen[0]
        for point in seen:
            if point[0] == byte_offset:
                return point[1], True
            if point[0] > byte_offset:
                span = point[0] - lo[0]
                return lo[1] + round((point[1] - lo[1]) * (byte_offset - lo[0]) / span), False
            lo = point
        return None  # past the last end seen

    def behind_s(self, key: Hashable, byte_offset: int, now: float) -> tuple[float, bool] | None:
        """(seconds since the message at ``byte_offset`` was first seen below an end,
        within the history?): the age, by arrival, of the oldest unread message when
        ``byte_offset`` is a committed position; too small by at most one interval. 0 at
        the end; when it arrived before the oldest end kept, the age of that end and
        False (at least that); None when nothing is known of ``key``."""
        seen = self._seen.get(key)
        if not seen:
            return None
        if byte_offset >= seen[-1][0]:
            return 0.0, True
        for point in seen:
            if point[0] > byte_offset:
                return max(now - point[2], 0.0), point is not seen[0]
        return None  # unreachable: the last end is above byte_offset

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop the keys not in ``keep``."""
        kept = set(keep)
        for key in [k for k in self._seen if k not in kept]:
            del self._seen[key]


class History:
    """The last ``size`` values of a few named series, for the page's small charts."""

    def __init__(self, names: Iterable[str], size: int = 120):
        self.series: dict[str, deque[float]] = {name: deque(maxlen=size) for name in names}
        self.times: deque[int] = deque(maxlen=size)

    def add(self, time_ms: int, **values: float) -> None:
        """Append one point to every series (missing ones get 0)."""
        self.times.append(time_ms)
        for name, series in self.series.items():
            series.append(round(float(values.get(name, 0.0)), 2))

    def as_dict(self) -> dict[str, list[float] | list[int]]:
        """``{"t": [ms...], name: [values...]}`` (JSON-able)."""
        out: dict[str, list[float] | list[int]] = {"t": list(self.times)}
        out.update({name: list(series) for name, series in self.series.items()})
        return out


__all__ = ["RATE_WINDOW_S", "History", "MessagePositions", "Rates"]
