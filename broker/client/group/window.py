"""How many bytes to ask per partition fetch so a long round trip does not cap the rate.

The fetcher keeps one fetch per partition in flight (the next offset is known only from
the answer), so a partition moves at most one fetch size per round trip. With ``P``
backlogged partitions on a broker, fetches of ``S`` bytes, a round trip ``R`` and a
path that carries ``B`` bytes/s, the link stays busy only if the other ``P - 1``
fetches cover the round trip while one answer is transferred:
``(P - 1) * S >= B * R``, the bandwidth-delay product (BDP). Across 50 ms at 470 MB/s
that is 24 MB: 4 partitions at a fixed 4 MiB cover half of it.

So :class:`FetchWindow` *measures* ``R`` and ``B`` per broker from the answers and
sizes the fetches from them, the way BBR sizes a TCP window (bounded by a memory cap):

- ``R`` (latency): ``first byte received - sent`` of an answer whose first bytes
  reached an idle connection (:attr:`broker.client.connection.ResponseFuture.after_idle`);
  an answer queued behind another answer on the connection says nothing about the path.
  The estimate is the least of the last ``LATENCY_SAMPLES`` such samples (queueing in
  the broker or the machine only ever adds to a sample).
- ``B`` (bandwidth): per answer of a backlogged broker, the bytes answered while that
  fetch was in flight over its flight time (BBR's delivery rate: Little's law makes it
  ``min(B, bytes in flight / R)``), over at least ``RATE_MIN_INTERVAL``; the
  estimate is the most of the last ``RATE_SAMPLES``. Answers of a caught-up broker (nothing came back full) say nothing.
- the size per partition is ``GAIN * B * R / (P - 1)`` (``P = 1``: over a third, so a
  lone partition's stop-and-wait still keeps the link busy 5/6 of the time), between
  ``base`` (the configured fetch size) and ``budget / P`` (and ``MAX_ANSWER_BYTES``).

While the window is the limit, the delivery rate is ``P * S / R``, so each round trip
multiplies the size by about ``GAIN * P / (P - 1)``: a cold start fills a 50 ms path
within two or three round trips (TCP's slow start doubles per round trip the same way),
and the size settles where the rate stops growing. Without latency ``B * R`` is small
and the size stays at ``base``; a path that gets shorter lowers ``R`` at its first idle
answer and gives the memory back. No IO, no clock, no threads: the fetcher calls it
under its lock with ``time.monotonic()`` times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

GAIN = 2.0
"""Bytes in flight per broker over the measured BDP: headroom for the answers' own
transfer times and for a rate that is still growing (BBR's cwnd gain is 2, too)."""
SOLO_SHARE = 1 / 3
"""``P - 1`` for a broker with one partition: it asks ``GAIN * BDP / SOLO_SHARE``."""
LATENCY_SAMPLES = 16
"""Idle-connection answers the latency estimate is the least of."""
RATE_SAMPLES = 16
"""Backlogged answers the bandwidth estimate is the most of."""
RATE_MIN_INTERVAL = 0.02
"""A delivery-rate sample spans at least this long: answers held up together (a busy
reader thread, a stalled machine) and then completed in a burst would otherwise look
like a link far faster than it is."""
MAX_ANSWER_BYTES = 30 * 1024 * 1024
"""Most bytes asked in one fetch answer (per partition here; the fetcher shares it among
a request's partitions). The client receives an answer into one growing buffer, and
past 32 MiB glibc's allocator maps each one afresh (its largest mmap threshold):
receiving 33 MiB answers cost 0.7 CPU s per GB here, 16-31 MiB ones 0.07-0.15."""
ROUND_TO = 64 * 1024
"""Sizes are asked in whole multiples of this (the broker reads whole batches anyway)."""


@dataclass
class _Broker:
    latency: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    rates: deque[float] = field(default_factory=lambda: deque(maxlen=RATE_SAMPLES))
    delivered: int = 0
    """Bytes answered by this broker so far (delivery-rate samples)."""
    partitions: int = 1
    """The broker's partitions being fetched (last told)."""


@dataclass(frozen=True)
class Ticket:
    """What :meth:`FetchWindow.sent` noted about one fetch, given back on its answer."""

    broker: Hashable
    sent_at: float
    asked: int
    """Bytes asked per partition."""
    delivered: int = 0
    """The broker's bytes answered when this fetch went out."""


class FetchWindow:
    """Per-broker fetch size from the measured latency and bandwidth; see the module docstring."""

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
        partitions = max(partitions, 1)
        if state is not None:
            state.partitions = partitions
        if state is None or self.budget <= 0 or not state.latency or not state.rates:
            return self.base
        bdp = max(state.rates) * min(state.latency)
        wanted = GAIN * bdp / (partitions - 1 if partitions > 1 else SOLO_SHARE)
        wanted = -(-int(wanted) // ROUND_TO) * ROUND_TO
        return max(self.base, min(wanted, self._cap(partitions)))

    def _cap(self, partitions: int) -> int:
        return max(self.base, min(self.budget // max(partitions, 1), MAX_ANSWER_BYTES))

    def sent(self, broker: Hashable, now: float, asked: int | None = None) -> Ticket:
        """A fetch to ``broker`` went out at ``now`` asking ``asked`` bytes per partition
        (default: the base size); hand the ticket to :meth:`answered`."""
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker()
        return Ticket(broker, now, self.base if asked is None else asked, state.delivered)

    def answered(
        self, ticket: Ticket, nbytes: int, full: bool, now: float, first_byte_at: float = 0.0, after_idle: bool = False
    ) -> None:
        """The fetch of ``ticket`` was answered with ``nbytes`` at ``now``.

        ``full``: some partition of it came back with as much as it asked (a backlog);
        ``first_byte_at``: when the answer's first bytes were read; ``after_idle``: they
        reached an idle connection (the answer was not queued behind another one).
        """
        state = self._brokers.get(ticket.broker)
        if state is None or self.budget <= 0:
            return
        state.delivered += nbytes
        if after_idle and first_byte_at >= ticket.sent_at:
            state.latency.append(first_byte_at - ticket.sent_at)
        if full:
            interval = max(now - ticket.sent_at, RATE_MIN_INTERVAL)
            state.rates.append((state.delivered - ticket.delivered) / interval)

    def estimates(self, broker: Hashable) -> tuple[float, int]:
        """(bandwidth estimate in bytes/s, bytes asked per partition now) for ``broker``."""
        state = self._brokers.get(broker)
        if state is None:
            return 0.0, self.base
        return (max(state.rates) if state.rates else 0.0, self.size(broker, state.partitions))

    def latency(self, broker: Hashable) -> float | None:
        """The latency estimate of ``broker`` in seconds (None before its first sample)."""
        state = self._brokers.get(broker)
        return min(state.latency) if state is not None and state.latency else None

    def forget(self, broker: Hashable) -> None:
        """Drop what was learnt about ``broker`` (its connection was replaced)."""
        self._brokers.pop(broker, None)


__all__ = ["FetchWindow", "MAX_ANSWER_BYTES", "Ticket"]
