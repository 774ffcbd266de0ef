"""Group commit: the sans-IO bookkeeping of "one fsync at a time, covering everything
appended meanwhile".

One :class:`CommitQueue` per log dir. An append adds its partition; if no commit round
is running, the caller starts one at once. A round takes every partition added so far
and fsyncs them together; partitions added while it runs wait for the next round, which
starts as soon as this one ends. So an idle broker syncs right after each append
(latency of one fsync), and a busy one syncs back to back, each round covering more
appends (the fsync rate follows the disk, not the message rate: no timer, no per-message
work). :func:`next_round_pause` paces the rounds of a busy log dir (at most 2,000 a
second, at most a tenth of the event loop). No I/O here:
:class:`broker.server.durability.flusher.Flusher` drives it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CommitQueue(Generic[K, V]):
    """Which partitions the next commit round covers, and whether a round is running."""

    __slots__ = ("_pending", "running", "rounds")

    def __init__(self) -> None:
        self._pending: dict[K, V] = {}
        self.running = False
        """True from :meth:`add` returning True until :meth:`round_done` returns False."""
        self.rounds = 0
        """Rounds taken so far (for tests and metrics)."""

    def add(self, key: K, item: V) -> bool:
        """``key`` has bytes to make durable. True: no round is running, the caller must
        start one now (call :meth:`take`); False: a running round's successor covers it."""
        self._pending[key] = item
        if self.running:
            return False
        self.running = True
        return True

    def take(self) -> dict[K, V]:
        """Start a round: everything added so far, in the order first added."""
        batch, self._pending = self._pending, {}
        self.rounds += 1
        return batch

    def round_done(self) -> bool:
        """The round ended. True: more was added meanwhile, start the next round now
        (call :meth:`take`); False: the queue is idle until the next :meth:`add`."""
        if self._pending:
            return True
        self.running = False
        return False

    def pending(self) -> list[V]:
        """The items the next round would take (a snapshot)."""
        return list(self._pending.values())

    def __contains__(self, key: object) -> bool:
        return key in self._pending

    def __len__(self) -> int:
        return len(self._pending)


MIN_ROUND_PERIOD_S = 0.0005
"""At most one round per log dir per half millisecond: a round waits for the fsync
before it anyway, this bounds the fsync rate (and the journal commits) of a busy log dir
on a fast disk to 2,000/s for at most 0.5 ms of added latency. (With 1 ms, at 10,000
msgs/s the wait for the next round was most of a message's latency: p50 3.5 ms against
1.3 ms with 0.5 ms, log dir on tmpfs, loaded machine, alternated.)"""
LOOP_SHARE = 10
"""A round's start-to-start period is at least this many times the event-loop CPU it
took (preparing and publishing): rounds take at most a tenth of the loop."""
CHEAP_ROUND_CPU_S = 0.00005
"""Rounds that cost the loop at least this much (several partitions: one of 100 costs
about a millisecond) also pause ``LOOP_SHARE - 1`` times their CPU after they end, as
before, which lets a busy broker's rounds cover more appends each; cheaper ones (one or
two partitions: 15-35 us each, traced at 10,000 msgs/s) only keep the period, so a
round whose fsync took longer than the period is followed by the next one at once."""
MIN_PAUSE_S = 0.0002
"""Shorter pauses are skipped (the next round starts at once)."""


def next_round_pause(started: float, now: float, cpu: float) -> float:
    """Seconds to wait before the next round of a log dir, which has work queued: 0 to
    start it now. ``started`` is when the round that just ended was taken and ``now``
    (one monotonic clock), ``cpu`` the event-loop CPU seconds it took.

    Why a period, not a pause after the end: the pause of 9x the round's CPU after its
    end (as every round had) cost a one-partition round 0.2-0.3 ms, and through the
    event loop's timer (epoll wakes on the millisecond) up to a millisecond, while its
    fsync had already kept it longer than the period: traced at 10,000 msgs/s (issue
    18), a quarter of the rounds waited more than 0.2 ms for it (docs/benchmarks.md)."""
    period = max(MIN_ROUND_PERIOD_S, cpu * LOOP_SHARE)
    pause = started + period - now
    if cpu >= CHEAP_ROUND_CPU_S:
        pause = max(pause, cpu * (LOOP_SHARE - 1))
    return pause if pause >= MIN_PAUSE_S else 0.0


INLINE_MAX_FSYNC_S = 0.001
"""A log dir whose recent fsyncs took longer than this never syncs on the event loop."""
INLINE_IDLE_FACTOR = 2.0
"""A round may fsync on the loop only if the log dir's last round ended at least this
many recent fsyncs ago: rounds on the loop then hold it at most a third of the time."""
INLINE_MAX_FILES = 1
"""Only rounds of this many files (one partition's active segment) sync on the loop."""
EWMA_WEIGHT = 0.2


class FsyncTimes:
    """A log dir's recent fsync duration (moving average, seconds) and when its last
    round ended (the loop's clock)."""

    __slots__ = ("fsync_s", "last_end")

    def __init__(self) -> None:
        self.fsync_s: float | None = None
        self.last_end = 0.0

    def ended(self, fsync_s: float, now: float) -> None:
        """A round ended ``now``; its fsyncs took ``fsync_s``."""
        previous = self.fsync_s
        self.fsync_s = fsync_s if previous is None else (previous + EWMA_WEIGHT * (fsync_s - previous))
        self.last_end = now


def inline_round(times: FsyncTimes, now: float, files: int) -> bool:
    """Whether the next round of an idle log dir runs its fsync on the event loop.

    At low load each round is one fsync of one file after a quiet spell, and handing it
    to the log dir's thread costs two thread wake-ups (the thread's, then the loop's)
    on top of the fsync: about 110 us on this 2-core machine, against 205 us for the
    fsync itself (measured alternately, issue 18). On the loop the round costs only the
    fsync, during which the loop waits. That is allowed only where it cannot take much
    of the loop: one file, fsyncs recently under :data:`INLINE_MAX_FSYNC_S`, and the log
    dir idle since its last round for :data:`INLINE_IDLE_FACTOR` fsyncs. A busy log dir
    (rounds back to back, or appends soon after a round) keeps its thread, as before."""
    fsync_s = times.fsync_s
    return (
        fsync_s is not None
        and files <= INLINE_MAX_FILES
        and fsync_s <= INLINE_MAX_FSYNC_S
        and now - times.last_end >= INLINE_IDLE_FACTOR * fsync_s
    )


__all__ = [
    "CHEAP_ROUND_CPU_S",
    "CommitQueue",
    "FsyncTimes",
    "INLINE_IDLE_FACTOR",
    "INLINE_MAX_FILES",
    "INLINE_MAX_FSYNC_S",
    "LOOP_SHARE",
    "MIN_PAUSE_S",
    "MIN_ROUND_PERIOD_S",
    "inline_round",
    "next_round_pause",
]
