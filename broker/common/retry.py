"""Exponential backoff, written once (sans IO apart from the injectable sleep).

Every place in logferry that waits before trying again uses :class:`Retry`: the
producer and the group fetcher between attempts on a partition, the replica fetcher
between connections to its leader, the broker registration waiting out a stale znode,
the agent before re-reading a file, the mirror while the target is away, and so on.

The delay after the ``n``-th consecutive failure is ``initial * multiplier**(n-1)``,
capped at ``maximum`` and then scaled by a random factor in ``[1 - jitter, 1]`` (so
clients failing together spread out, and never wait longer than the cap). A
:class:`Retry` can be used two ways:

- as a *policy*: :meth:`Retry.delay` maps a failure count kept elsewhere (per
  partition, per file) to a delay;
- as one *sequence* of attempts: :meth:`Retry.sleep` (or :meth:`Retry.next_delay`
  for callers that wait on something else, an event or an asyncio loop) counts a
  failure and waits its delay; :meth:`Retry.reset` starts afresh after a success.
  ``max_tries`` and ``deadline`` bound the sequence; the caller asks
  :attr:`Retry.exhausted` (or :attr:`Retry.expired`) and raises its own actionable
  error, because only the caller knows what to tell the user.

Sleep, clock and randomness are injectable so tests run without real waiting.
(kazoo's ``KazooRetry`` keeps its policy and its state in one object too; ours leaves
the loop to the caller, since our loops differ in what they catch and what they log.)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from broker.common.errors import ConfigError

__all__ = ["Retry"]


class Retry:
    """Exponential backoff with jitter, optional limits and injectable time (see module)."""

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 2.0,
        multiplier: float = 2.0,
        jitter: float = 0.0,
        *,
        max_tries: int | None = None,
        deadline: float | None = None,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        """
        :param initial: delay after the first failure (seconds).
        :param maximum: cap on any delay (seconds), before jitter.
        :param multiplier: growth factor per further failure (1 keeps the delay fixed).
        :param jitter: fraction in [0, 1]: each delay is scaled by a random factor in
            ``[1 - jitter, 1]`` (0: no jitter; 0.5: between half and the full delay).
        :param max_tries: attempts allowed in one sequence (None: no limit).
        :param deadline: seconds a sequence may last, counted from creation or
            :meth:`reset` (None: no limit).
        :param sleep: waits a number of seconds (``time.sleep``; an ``Event.wait`` to be
            interruptible; a recorder in tests).
        :param clock: monotonic seconds (``time.monotonic``).
        :param rng: uniform random numbers in [0, 1) for the jitter.
        """
        if initial < 0 or maximum < 0:
            raise ConfigError(f"backoff delays must not be negative (initial={initial}, maximum={maximum})")
        if multiplier < 1:
            raise ConfigError(f"backoff multiplier must be at least 1, not {multiplier}")
        if not 0 <= jitter <= 1:
            raise ConfigError(f"backoff jitter must be a fraction in [0, 1], not {jitter}")
        if max_tries is not None and max_tries < 1:
            raise ConfigError(f"max_tries must be at least 1 (or None), not {max_tries}")
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self.max_tries = max_tries
        self.deadline = deadline
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        self.failures = 0
        """Failures counted in the current sequence (since creation or :meth:`reset`)."""
        self.started = clock()
        """Clock reading when the current sequence started."""

    def __repr__(self) -> str:
        return (
            f"Retry(initial={self.initial}, maximum={self.maximum}, "
            f"multiplier={self.multiplier}, jitter={self.jitter}, "
            f"max_tries={self.max_tries}, deadline={self.deadline})"
        )

    # -- the policy ---------------------------------------------------------------------

    def ceiling(self, failures: int) -> float:
        """The delay after ``failures`` consecutive failures (1 = the first), before jitter."""
        if failures < 1:
            return 0.0
        try:
            grown = self.initial * self.multiplier ** (failures - 1)
        except OverflowError:  # a very long outage: the cap was reached long ago
            return self.maximum
        return min(grown, self.maximum)

    def delay(self, failures: int) -> float:
        """The jittered delay after ``failures`` consecutive failures (1 = the first)."""
        return self.ceiling(failures) * (1 - self.jitter * self._rng())

    # -- one sequence of attempts -------------------------------------------------------

    def next_delay(self) -> float:
        """Count a failure and return how long to wait before the next attempt."""
        self.failures += 1
        return self.delay(self.failures)

    def sleep(self) -> float:
        """Count a failure, wait its delay with the injected sleep, return the delay."""
        delay = self.next_delay()
        self._sleep(delay)
        return delay

    def reset(self) -> None:
        """Start a new sequence: the next failure waits ``initial`` again."""
        self.failures = 0
        self.started = self._clock()

    def elapsed(self) -> float:
        """Seconds since the current sequence started."""
        return self._clock() - self.started

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative); None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self.elapsed())

    @property
    def expired(self) -> bool:
        """True once the sequence has lasted its ``deadline``."""
        return self.deadline is not None and self.elapsed() >= self.deadline

    @property
    def exhausted(self) -> bool:
        """True once ``max_tries`` attempts failed or the deadline passed: give up."""
        return self.expired or (self.max_tries is not None and self.failures >= self.max_tries)
