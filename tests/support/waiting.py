"""Waiting for a condition in tests: poll it, with a bound, instead of sleeping a guess.

One helper for the whole suite: :func:`wait_until` in threads and processes,
:func:`wait_until_async` inside an event loop. Both return the predicate's first
truthy value (so a test can wait for *and* get, say, the new leader's id) and raise
AssertionError naming ``what`` (and the last value or error seen) once ``timeout``
seconds passed. The predicate is asked once more at the deadline, so a condition
that comes true during the last pause still counts.

A package whose tests want another cadence, or a predicate that may raise while a
server is down, binds the options once (``functools.partial(wait_until, interval=...,
ignore=(Exception,))``); the polling itself lives only here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["wait_until", "wait_until_async"]


class _Poll:
    """The bookkeeping of one wait: deadline, last value, the failure message."""

    def __init__(
        self,
        predicate: Callable[[], object],
        timeout: float,
        what: str,
        interval: float,
        ignore: tuple[type[BaseException], ...],
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval}")
        self.predicate = predicate
        self.timeout = timeout
        self.what = what
        self.interval = interval
        self.ignore = ignore
        self.deadline = time.monotonic() + timeout
        self.last: object = None

    def check(self) -> bool:
        """Ask the predicate once; True when it held (its value is in ``last``)."""
        try:
            self.last = self.predicate()
        except self.ignore as exc:
            self.last = exc
            return False
        return bool(self.last)

    def pause(self) -> float:
        """Seconds to sleep before the next check; AssertionError once time is up."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            shown = "" if self.last is None or self.last is False else f" (last: {self.last!r})"
            raise AssertionError(f"timed out after {self.timeout}s waiting for {self.what}{shown}")
        return min(self.interval, remaining)


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` every ``interval`` s until it returns something truthy; return it.

    Raise AssertionError naming ``what`` after ``timeout`` s. Exceptions of the types in
    ``ignore`` count as "not yet" (a broker being restarted); others propagate at once.
    """
    poll = _Poll(predicate, timeout, what, interval, ignore)
    while not poll.check():
        time.sleep(poll.pause())
    return poll.last  # type: ignore[return-value]


async def wait_until_async(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    interval: float = 0.01,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`wait_until` for code on an event loop: pauses with ``asyncio.sleep`` so
    the tasks that make the condition true keep running."""
    poll = _Poll(predicate, timeout, what, interval, ignore)
    while not poll.check():
        await asyncio.sleep(poll.pause())
    return poll.last  # type: ignore[return-value]
