"""Log lines that a flood cannot multiply: at most one per key and interval.

A full disk refuses thousands of produces a second, a password-guessing client fails
as fast as it can send, a denied principal retries in a loop: each would write a line
per event. :class:`RateLimitedLog` lets one line per key through every ``interval_s``
and says in the next one how many it muted, so the log keeps the facts at a bounded
size. Nothing here does IO besides the logger call; the clock is injectable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable


class RateLimitedLog:
    """One line per key every ``interval_s`` to ``logger``; the rest are counted and
    the next line that goes out ends with ``(<n> <muted>)``."""

    __slots__ = ("logger", "interval_s", "muted", "clock", "_last", "_suppressed")

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float,
        muted: str = "more since the last line",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.logger = logger
        self.interval_s = interval_s
        self.muted = muted
        """How the count of muted lines reads: "more refused since the last report"."""
        self.clock = clock
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}

    def allow(self, key: Hashable = None) -> int | None:
        """None while ``key`` is muted (the event is counted); otherwise how many
        events of ``key`` were muted since the last one let through."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)

    def log(self, level: int, message: str, *args: object, key: Hashable = None) -> bool:
        """Log ``message % args`` at ``level`` unless ``key`` is muted; True if logged."""
        muted = self.allow(key)
        if muted is None:
            return False
        note = f" ({muted} {self.muted})" if muted else ""
        self.logger.log(level, message + "%s", *args, note)
        return True

    def warning(self, message: str, *args: object, key: Hashable = None) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, message, *args, key=key)


__all__ = ["RateLimitedLog"]
