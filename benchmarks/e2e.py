"""End-to-end latency measurement shared by ``benchmarks/latency.py`` (logferry's own
latency benchmark) and the paper experiment's latency case (every system).

The method, written once: each message starts with a stamp (sequence number, send time
from ``time.monotonic_ns()``) and is padded to its size. CLOCK_MONOTONIC is one clock
for the whole machine on Linux, so a consumer in another process computes receive time
minus send time directly. The producer sends at a fixed rate against absolute due times
(a late send is followed by quicker ones, so the rate holds). The first
``WARMUP_S`` seconds of a run are not counted. Results are p50, p99, p99.9 and max in
milliseconds, nearest rank.

:func:`run_end_to_end` runs one measurement against any :class:`LatencyClient`: the
consumer in a spawned process (a thread in the producer's process would share its GIL
and measure that), the producer in the calling process.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import struct
import time
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple, Protocol

STAMP = struct.Struct("<qq")  # sequence number, send time (monotonic ns)
WARMUP_S = 1.0
PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0))
READY_TIMEOUT = 60.0


class Stamped(NamedTuple):
    """One message to send: its sequence number, send time (ns) and bytes."""

    seq: int
    sent_ns: int
    value: bytes


class StampedMessages:
    """``count`` messages of ``size`` bytes at ``rate`` msgs/s, each stamped with its
    send time just before it is handed to the client.

    Iterate it (blocking sleeps) in a synchronous producer, or ``async for`` over
    :meth:`paced` in an asyncio one, so the event loop keeps running between sends.
    """

    def __init__(self, rate: float, count: int, size: int):
        if size < STAMP.size:
            raise ValueError(f"messages must be at least {STAMP.size} bytes, not {size}")
        if rate <= 0 or count < 1:
            raise ValueError("rate must be positive and count at least 1")
        self.rate, self.count, self.size = rate, count, size
        self.padding = b"x" * (size - STAMP.size)
        self.interval_ns = 1e9 / rate
        self.start_ns = 0

    def _delay(self, seq: int) -> float:
        """Seconds until message ``seq`` is due (<= 0: due already)."""
        if seq == 0:
            self.start_ns = time.monotonic_ns()
        due = self.start_ns + int(seq * self.interval_ns)
        return (due - time.monotonic_ns()) / 1e9

    def _stamp(self, seq: int) -> Stamped:
        sent = time.monotonic_ns()
        return Stamped(seq, sent, STAMP.pack(seq, sent) + self.padding)

    def __iter__(self) -> Iterator[Stamped]:
        for seq in range(self.count):
            delay = self._delay(seq)
            if delay > 0:
                time.sleep(delay)
            yield self._stamp(seq)

    async def paced(self) -> AsyncIterator[Stamped]:
        """The same messages for an asyncio producer."""
        for seq in range(self.count):
            delay = self._delay(seq)
            if delay > 0:
                await asyncio.sleep(delay)
            yield self._stamp(seq)


class LatencyRecorder:
    """The consumer's side: the latency (ns) of each received message, by sequence."""

    def __init__(self, count: int):
        self.latencies = array("q", bytes(8 * count))
        self.seen = 0
        self._unpack = STAMP.unpack_from
        self._clock = time.monotonic_ns

    def record(self, value: bytes) -> None:
        """Note the arrival of ``value`` (a stamped message) now."""
        now = self._clock()
        seq, sent = self._unpack(value)
        self.latencies[seq] = now - sent
        self.seen += 1


def percentiles(values_ns: list[int]) -> dict[str, float]:
    """p50, p99, p99.9 and max in ms (nearest rank)."""
    if not values_ns:
        raise ValueError("no latencies to summarise")
    ordered = sorted(values_ns)
    last = len(ordered) - 1
    return {name: ordered[min(last, int(q * len(ordered)))] / 1e6 for name, q in PERCENTILES}


def median_percentiles(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each percentile's median over runs."""
    return {name: statistics.median(run[name] for run in runs) for name, _ in PERCENTILES}


def counted(latencies: array, rate: float) -> list[int]:
    """The latencies after the warm-up second(s) of a run at ``rate`` msgs/s."""
    return latencies[int(rate * WARMUP_S) :].tolist()


class LatencyClient(Protocol):
    """What :func:`run_end_to_end` needs from a messaging system: picklable (the
    consumer side runs in a spawned process), holding only how to reach the server."""

    def receive(
        self, dest: str, count: int, ready: Callable[[], None], on_value: Callable[[bytes], None], timeout: float
    ) -> None:
        """Connect and subscribe to ``dest``, call ``ready()``, then call ``on_value``
        for each message as it arrives until ``count`` arrived or ``timeout`` seconds
        passed."""

    def produce(self, dest: str, messages: StampedMessages, timeout: float) -> None:
        """Send every message of ``messages`` (in its pacing) to ``dest`` with the
        system's low-latency settings; return once the server acknowledged them all."""


def _consumer_main(client: LatencyClient, dest: str, count: int, ready: Any, out: Any, timeout: float) -> None:
    recorder = LatencyRecorder(count)
    try:
        client.receive(dest, count, ready.set, recorder.record, timeout)
        out.send((recorder.seen, recorder.latencies.tobytes(), None))
    except Exception as exc:  # reported by the parent as the run's failure
        out.send((recorder.seen, b"", f"{type(exc).__name__}: {exc}"))


def run_end_to_end(
    client: LatencyClient, dest: str, rate: float, seconds: float, size: int, timeout: float
) -> dict[str, float]:
    """One run: a consumer process and this process producing ``rate`` msgs/s for
    ``seconds``; the percentiles of the end-to-end latency after the warm-up.

    Raises RuntimeError (with the reason) if a message is lost or a side times out;
    the consumer process never outlives the call.
    """
    if seconds <= WARMUP_S:
        raise ValueError(f"a run must last longer than the {WARMUP_S:g} s warm-up")
    count = int(rate * seconds)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=_consumer_main, args=(client, dest, count, ready, send, timeout), daemon=True)
    consumer.start()
    try:
        waited = time.monotonic() + READY_TIMEOUT
        while not ready.wait(0.2):
            if receive.poll():  # the consumer failed before it was ready
                break
            if not consumer.is_alive() or time.monotonic() > waited:
                raise RuntimeError(f"{dest}: the consumer process did not get ready")
        if ready.is_set():
            client.produce(dest, StampedMessages(rate, count, size), timeout)
        if not receive.poll(timeout):
            raise RuntimeError(f"{dest}: the consumer did not receive every message within {timeout:.0f} s")
        seen, raw, error = receive.recv()
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
            consumer.join(5)
    if error:
        raise RuntimeError(f"{dest}: consumer failed after {seen:,} messages: {error}")
    if seen != count:
        raise RuntimeError(f"{dest}: the consumer received {seen:,} of {count:,} messages")
    latencies = array("q")
    latencies.frombytes(raw)
    return percentiles(counted(latencies, rate))
