"""The follower-side reassignment throttle: a token bucket (sans IO).

Decided per broker, on the follower's side: a broker copying partitions that a
reassignment added to it limits the bytes it fetches for them, all leaders together,
to the reassignment's bytes/s (``reassign execute --throttle``). The leader needs no
state for it, and partitions the broker already held in sync are never slowed. One
fetch may overdraw the bucket (a fetch always returns whole batches); the debt is
paid before the next throttled fetch, so the rate holds on average.

Times are plain floats (seconds, monotonic) passed in by the caller.
"""

from __future__ import annotations

MIN_FETCH_BYTES = 64 * 1024
"""The smallest throttled fetch asked for (a fetch returns at least one whole batch)."""

BURST_S = 0.2
"""Tokens saved up while idle, in seconds of the rate: keeps short bursts short."""


class Throttle:
    """A token bucket refilled at the rate given on each call."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self._at: float | None = None

    def _refill(self, rate: float, now: float) -> None:
        if self._at is not None:
            self.tokens = min(self.tokens + (now - self._at) * rate, rate * BURST_S)
        self._at = now

    def allowance(self, rate: float, now: float, max_bytes: int) -> int:
        """Bytes one throttled fetch may ask for now (0: wait :meth:`delay`)."""
        self._refill(rate, now)
        if self.tokens <= 0:
            return 0
        return min(max_bytes, max(int(self.tokens), MIN_FETCH_BYTES))

    def spend(self, nbytes: int) -> None:
        """Charge what a throttled fetch brought back (may go below zero)."""
        self.tokens -= nbytes

    def delay(self, rate: float) -> float:
        """Seconds until the bucket holds tokens again."""
        return max(-self.tokens / rate, 0.0) + 0.001 if rate > 0 else 0.0


__all__ = ["MIN_FETCH_BYTES", "Throttle"]
