"""Per-second rates from counters read at intervals, and short histories for charts (sans IO).

The console reads ever-growing numbers (a partition's log end, a group's committed
offset); the rate between two readings is the difference over the time between them.
A counter that went backwards (a topic deleted and re-created, a truncated log) gives
no rate for that interval rather than a negative one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable


class Rates:
    """The latest per-second rate of each key, from successive :meth:`update` calls."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, float]] = {}
        self._rate: dict[Hashable, float] = {}

    def update(self, key: Hashable, value: float, now: float) -> float:
        """Record ``value`` of ``key`` at ``now`` (seconds); return its rate (0 at first)."""
        last = self._last.get(key)
        self._last[key] = (value, now)
        rate = 0.0 if last is None or now <= last[1] or value < last[0] else (value - last[0]) / (now - last[1])
        self._rate[key] = rate
        return rate

    def get(self, key: Hashable) -> float:
        """The latest rate of ``key`` (0 when unknown)."""
        return self._rate.get(key, 0.0)

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop the keys not in ``keep``."""
        kept = set(keep)
        for key in [k for k in self._last if k not in kept]:
            self._last.pop(key, None)
            self._rate.pop(key, None)


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


__all__ = ["History", "Rates"]
