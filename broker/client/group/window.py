"""How many bytes to ask per partition fetch so a long round trip does not cap the rate.

The fetcher keeps one fetch per partition in flight (the next offset is known only from
the answer), so a partition moves at most one fetch size per round trip. With ``P``
backlogged partitions on a broker, fetches of ``S`` bytes, a round trip (latency) ``R``
and a link that carries ``B`` bytes/s, the broker's rate is about::

    min(B, P*S / (R + S/B))           (each fetch: wait R, then its own S/B transfer)

so the link stays busy only if the other ``P - 1`` fetches cover the latency:
``(P - 1) * S >= B * R``, the bandwidth-delay product (BDP). Across 50 ms at 400 MB/s
that is 20 MB: 4 partitions at 4 MiB each cover 12 MB of it, hence ~60 % of the rate.

Neither ``B`` nor ``R`` can be read off a busy stop-and-wait pipe (every answer also
waits behind the others'), so :class:`FetchWindow` finds the size the way a probe
does, bounded by a memory cap:

- an *epoch* is one cycle at the current size: from the first answer to a fetch sent
  at that size until each partition answered once more; its rate is the bytes of
  those answers over that time;
- *probing*: after an epoch in which the broker was backlogged (most answers full),
  the first ``WARM_UP_CYCLES`` aside, if the rate grew by ``GROWTH`` or more over the
  best so far, the size doubles (a
  window-bound pipe moves about twice as much per round trip at twice the size); if it
  did not, the link or the CPU is the limit: the size goes back to the best one and
  *holds*;
- after ``HOLD_EPOCHS`` held epochs it probes again, alternately one halving (kept if
  the rate stays within ``SHRINK``: a size grown on a noisy cycle gives its memory
  back) and one doubling (the path or the load may have changed): holds last 4
  epochs at first, twice as many after each failed doubling in a row, up to 64; an
  epoch that was not backlogged decides nothing;
- the size stays between ``base`` (the configured fetch size) and ``budget / P`` (at
  most ``budget`` bytes asked from one broker at once).

Without latency a doubling adds nothing and the size returns to ``base``; across a
WAN it doubles while the rate follows. No IO, no clock, no threads: the fetcher calls
it under its lock with ``time.monotonic()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

GROWTH = 1.2
"""A doubling is kept only if the rate grew at least this much (noise is not growth; a
window-bound pipe gains 50 % or more from its first doublings, one partition alone
still 20 % up to 80 % of the path)."""
SHRINK = 1.1
"""Half the size is kept if the rate stays within this factor (memory and CPU back)."""
WARM_UP_CYCLES = 1
"""Cycles of a new broker that decide nothing: a consumer's start (positions resolved,
a seek) makes their rate say nothing about the path."""
HOLD_EPOCHS = (4, 64)
"""Held epochs before probing one doubling again: 4 after a probe that failed once (a
noisy cycle costs little), twice as many after each further failure in a row, at most 64."""
MAX_CYCLE = 16
"""Answers per cycle at most (a broker with hundreds of partitions still decides quickly)."""


@dataclass
class _Broker:
    size: int
    """Bytes asked per partition now."""
    changed_at: float = 0.0
    """When ``size`` last changed: answers to fetches sent before it do not count."""
    partitions: int = 1
    """The broker's partitions being fetched (last told)."""
    cycle: int = 1
    """Answers per cycle (its partitions, at most MAX_CYCLE)."""
    answers: int = 0
    """Answers counted in this epoch."""
    full: int = 0
    """Of those, answers that came back (nearly) full: the partition has a backlog."""
    measure_from: float = 0.0
    """When the warm-up cycle ended (the measured cycle's start)."""
    measured: int = 0
    """Bytes of the measured cycle."""
    best_rate: float = 0.0
    best_size: int = 0
    holding: int = 0
    """Epochs left to hold (0: probing)."""
    hold: int = HOLD_EPOCHS[0]
    """Epochs the next hold lasts."""
    probing_down: bool = False
    """The current epoch tries half the size (after a hold that followed a probe up)."""
    warm_up: int = WARM_UP_CYCLES
    """Cycles still to pass before the first judgement."""


@dataclass(frozen=True)
class Ticket:
    """What :meth:`FetchWindow.sent` noted about one fetch, given back on its answer."""

    broker: Hashable
    sent_at: float
    asked: int
    """Bytes asked per partition."""


class FetchWindow:
    """Per-broker fetch size found by probing; see the module docstring."""

    def __init__(self, base: int, budget: int):
        if base < 1 or budget < 0:
            raise ValueError("base must be positive and budget not negative")
        self.base = base
        self.budget = budget
        """Most bytes asked from one broker at once (0: no adapting, always ``base``)."""
        self._brokers: dict[Hashable, _Broker] = {}

    def size(self, broker: Hashable, partitions: int) -> int:
        """Bytes to ask per partition of ``broker`` while ``partitions`` of it are fetched."""
        state = self._brokers.get(broker)
        if state is None:
            return self.base
        state.partitions = max(partitions, 1)
        state.cycle = min(state.partitions, MAX_CYCLE)
        return min(state.size, self._cap(partitions))

    def _cap(self, partitions: int) -> int:
        return max(self.base, self.budget // max(partitions, 1))

    def sent(self, broker: Hashable, now: float, asked: int | None = None) -> Ticket:
        """A fetch to ``broker`` went out at ``now`` asking ``asked`` bytes per partition
        (default: the current size); hand the ticket to :meth:`answered`."""
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker(self.base, changed_at=now)
        return Ticket(broker, now, state.size if asked is None else asked)

    def answered(self, ticket: Ticket, nbytes: int, full: bool, now: float) -> None:
        """The fetch of ``ticket`` was answered with ``nbytes`` at ``now``; ``full``: some
        partition of it came back with as much as it asked (it has a backlog)."""
        state = self._brokers.get(ticket.broker)
        if state is None or self.budget <= 0 or ticket.sent_at < state.changed_at:
            return  # asked at an older size: says nothing about this one
        state.answers += 1
        state.full += bool(full)
        if state.answers == 1:  # the first answer at this size: the measured cycle starts
            state.measure_from = now
            return
        state.measured += nbytes
        if state.answers <= state.cycle:
            return
        elapsed = now - state.measure_from
        if state.warm_up:
            state.warm_up -= 1
            self._restart(state, state.size, now)
        elif elapsed > 0 and 2 * state.full > state.answers:  # backlogged: the window can matter
            self._judge(state, state.measured / elapsed, now)
        else:
            self._restart(state, state.size, now)

    def _judge(self, state: _Broker, rate: float, now: float) -> None:
        if state.holding:
            state.holding -= 1
            if state.holding:
                self._restart(state, state.size, now)
                return
            # probe again from here: down if the last probe went up (a size grown on a
            # noisy cycle, or a path that got shorter, gives its memory back), else up
            state.best_rate, state.best_size = rate, state.size
            state.probing_down = state.size > self.base and not state.probing_down
            if state.probing_down:
                self._restart(state, max(state.size // 2, self.base), now)
            elif state.size * 2 <= self._cap(state.partitions):
                self._restart(state, state.size * 2, now)
            else:
                state.holding = HOLD_EPOCHS[1]  # at the cap
                self._restart(state, state.size, now)
            return
        if state.probing_down:
            if rate * SHRINK >= state.best_rate:  # half the size cost (almost) nothing
                state.best_rate, state.best_size = rate, state.size
            state.holding = HOLD_EPOCHS[0]
            self._restart(state, state.best_size, now)
            return
        if rate >= state.best_rate * GROWTH:
            state.best_rate, state.best_size = rate, state.size
            state.hold = HOLD_EPOCHS[0]
            if state.size * 2 <= self._cap(state.partitions):
                self._restart(state, state.size * 2, now)
                return
            state.holding = HOLD_EPOCHS[1]  # at the cap
            self._restart(state, state.size, now)
            return
        # a doubling added nothing: back to the best size for a while
        state.holding, state.hold = state.hold, min(2 * state.hold, HOLD_EPOCHS[1])
        self._restart(state, state.best_size or self.base, now)

    @staticmethod
    def _restart(state: _Broker, size: int, now: float) -> None:
        if size != state.size:
            state.size, state.changed_at = size, now
        state.answers = state.full = state.measured = 0

    def estimates(self, broker: Hashable) -> tuple[float, int]:
        """(best rate measured bytes/s, bytes asked per partition now) for ``broker``."""
        state = self._brokers.get(broker)
        return (0.0, self.base) if state is None else (state.best_rate, state.size)

    def forget(self, broker: Hashable) -> None:
        """Drop what was learnt about ``broker`` (its connection was replaced)."""
        self._brokers.pop(broker, None)


__all__ = ["FetchWindow", "Ticket"]
