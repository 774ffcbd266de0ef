"""Abusive clients cannot grow the broker's memory or starve a well-behaved client.

Each test starts a real broker, runs a well-behaved producer and consumer in a thread
throughout, attacks the broker from raw sockets, and reads the broker's resident set
from ``/proc/<pid>/status``. The well-behaved client's p99 latency (one produce
answered plus one fetch that returns it) is printed (``pytest -s`` shows it) and
asserted against a generous bound only: the machine is shared.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from typing import Any

import pytest

from broker.client import Producer, SimpleConsumer
from broker.testing.localrun import free_port
from broker.wire import protocol, records
from tests.support.memory import RssSampler, rss_bytes
from tests.support.metrics import samples, scrape, value
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

MiB = 1 << 20


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class WellBehaved:
    """A producer and a consumer in a thread: send one message, wait for its answer,
    fetch until it is read back in order; records each round trip's latency."""

    def __init__(self, bootstrap: list[str], topic: str = "good", limit: int = 100_000, **client: Any):
        self.bootstrap = bootstrap
        self.client = client
        """Extra client options (``tls=``, ``sasl=``) for its producer and consumer."""
        self.topic = topic
        self.limit = limit
        self.latencies: list[float] = []
        self.read: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="well-behaved")
        self._ready = threading.Event()

    def start(self) -> WellBehaved:
        self._thread.start()
        assert self._ready.wait(30), f"well-behaved client did not start: {self.errors}"
        return self

    def _run(self) -> None:
        try:
            with (
                Producer(brokers=self.bootstrap, linger_ms=0, **self.client) as producer,
                SimpleConsumer(brokers=self.bootstrap, **self.client) as consumer,
            ):
                offset = 0
                sent = 0
                while not self._stop.is_set() and sent < self.limit:
                    value = b"m-%d" % sent
                    started = time.perf_counter()
                    producer.send(self.topic, [value], partition=0).wait(30)
                    deadline = started + 30
                    got: list[bytes] = []
                    while not got and time.perf_counter() < deadline:
                        result = consumer.fetch(self.topic, 0, offset, max_wait_ms=200)
                        for batch in result.batches:
                            got.extend(batch.values)
                        offset = result.next_offset
                    self.latencies.append(time.perf_counter() - started)
                    self.read.extend(got)
                    sent += 1
                    self._ready.set()
        except Exception as exc:  # recorded and asserted on by the test
            self.errors.append(repr(exc))
            self._ready.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "well-behaved client hung"

    def p99(self, since: int = 0) -> float:
        values = sorted(self.latencies[since:])
        assert values, "the well-behaved client made no round trip"
        return values[min(len(values) - 1, int(len(values) * 0.99))]

    def check(self, since: int, at_least: int) -> float:
        """Assert it kept working in order; return its p99 since ``since``."""
        assert not self.errors, self.errors
        done = len(self.latencies) - since
        assert done >= at_least, f"only {done} round trips during the attack"
        read = list(self.read)  # a snapshot: the client's thread may still append
        assert read == [b"m-%d" % i for i in range(len(read))], "out of order"
        return self.p99(since)


def _connect(address: str) -> socket.socket:
    host, port = address.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _send_some(socks: dict[socket.socket, memoryview], seconds: float) -> int:
    """Send each socket's remaining bytes without blocking, round robin, for at most
    ``seconds``; returns the bytes sent."""
    for sock in socks:
        sock.setblocking(False)
    sent = 0
    deadline = time.monotonic() + seconds
    while socks and time.monotonic() < deadline:
        progress = False
        for sock, rest in list(socks.items()):
            try:
                n = sock.send(rest[: 256 * 1024])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                del socks[sock]
                continue
            sent += n
            progress = True
            if n == len(rest):
                del socks[sock]
            else:
                socks[sock] = rest[n:]
        if not progress:
            time.sleep(0.02)
    return sent


def _assert_clean(cluster) -> None:
    broker = cluster.brokers[0]
    assert broker.is_running(), cluster.logs()
    assert "Traceback" not in broker.log_text(), broker.log_tail(80)


def test_half_sent_big_frames_do_not_grow_memory(broker_cluster):
    """16 connections each send most of a 16 MiB frame and stop; before the request
    budget this took the broker from 33 MB to 295 MB."""
    metrics_port = free_port()
    cluster = broker_cluster(
        1,
        broker={
            "max_queued_request_bytes": 40 * MiB,
            "incomplete_request_timeout_ms": 60_000,
            "metrics_port": metrics_port,
        },
    )
    pid = cluster.brokers[0].proc.pid
    good = WellBehaved(cluster.bootstrap).start()
    time.sleep(1.0)
    baseline = rss_bytes(pid)
    sampler = RssSampler(pid)
    start = len(good.latencies)
    frame_size = 16 * MiB
    header = {"api": protocol.PRODUCE, "v": 1, "id": 1, "acks": 1, "parts": [["bad", 0, frame_size - 200]]}
    prefix = protocol.encode_frame(header, frame_size - 200)
    part = prefix + bytes(12 * MiB)  # most of the frame, never the end
    attackers = [_connect(cluster.bootstrap[0]) for _ in range(16)]
    try:
        sent = _send_some({s: memoryview(part) for s in attackers}, seconds=8.0)
        time.sleep(3.0)  # let the broker read what it will
        peak = sampler.stop()
        p99 = good.check(start, at_least=5)
        print(
            f"\nhalf-sent frames: {sent / MiB:.0f} MiB sent by 16 attackers; broker RSS "
            f"{baseline / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB; well-behaved "
            f"client p99 {p99 * 1000:.0f} ms over {len(good.latencies) - start} round trips"
        )
        counted = samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
        assert value(counted, "logferry_queued_request_bytes") <= 40 * MiB
        assert value(counted, "logferry_connection_read_holds_total", reason="budget") >= 1
        assert value(counted, "logferry_connections_held") >= 1
        # 40 MiB of budget plus read buffers; 262 MiB more before the budget existed
        assert peak - baseline < 90 * MiB, (baseline, peak)
        assert p99 < 5.0
    finally:
        for sock in attackers:
            sock.close()
        good.stop()
    _assert_clean(cluster)


@pytest.mark.slow
def test_a_client_that_never_reads_its_answers_is_paused(broker_cluster):
    """Pipelined produce, fetch and metadata requests whose answers are never read: the
    broker stops reading that connection instead of queueing answers without end
    (metadata answers for 30 topics are ~100 times their request: without the limit the
    broker's write buffer grew by hundreds of MiB)."""
    cluster = broker_cluster(1, broker={"max_unsent_bytes_per_connection": 4 * MiB})
    pid = cluster.brokers[0].proc.pid
    good = WellBehaved(cluster.bootstrap).start()
    with Producer(brokers=cluster.bootstrap, linger_ms=5) as producer:
        for i in range(30):
            producer.send(f"flood-{i:02d}-" + "x" * 100, [b"x"], partition=0).wait(30)
    time.sleep(0.5)
    baseline = rss_bytes(pid)
    sampler = RssSampler(pid)
    start = len(good.latencies)
    batch = records.encode_batch([bytes(100)], None, 1)
    requests = bytearray()
    for corr in range(3000):
        if corr % 3 == 0:
            requests += (
                protocol.encode_request(
                    protocol.PRODUCE, corr, {"acks": 1, "parts": [["flood-00-" + "x" * 100, 1, len(batch)]]}, len(batch)
                )
                + batch
            )
        elif corr % 3 == 1:  # an empty partition: answered at once, without sendfile
            requests += protocol.encode_request(
                protocol.FETCH,
                corr,
                {"max_wait_ms": 0, "min_bytes": 0, "parts": [["flood-01-" + "x" * 100, 3, 0, MiB]]},
            )
        else:
            requests += protocol.encode_request(protocol.METADATA, corr, {"topics": None})
    attacker = _connect(cluster.bootstrap[0])
    attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        sent = 0
        for _ in range(40):  # 40 rounds of 3,000 pipelined requests, never reading
            sent += _send_some({attacker: memoryview(bytes(requests))}, seconds=0.5)
        time.sleep(2.0)
        peak = sampler.stop()
        p99 = good.check(start, at_least=5)
        print(
            f"\nnever-reading pipeliner: {sent / MiB:.1f} MiB of requests taken by the "
            f"kernel and broker; broker RSS {baseline / MiB:.0f} MiB before, peak "
            f"{peak / MiB:.0f} MiB; well-behaved client p99 {p99 * 1000:.0f} ms over "
            f"{len(good.latencies) - start} round trips"
        )
        assert sent < 40 * len(requests), "the broker kept reading a client that never reads"
        assert peak - baseline < 80 * MiB, (baseline, peak)
        assert p99 < 5.0
    finally:
        attacker.close()
        good.stop()
    _assert_clean(cluster)


IDLE_TIMEOUT_MS = 6000


def test_idle_connections_are_dropped_and_capped(broker_cluster):
    """1,000 connections that never speak: those over max_connections are closed at
    once, the rest after incomplete_request_timeout_ms; the broker keeps serving."""
    metrics_port = free_port()
    # A timeout long enough that "refused at once" (below) cannot be its work, even when
    # the broker is slow to accept on a busy machine.
    cluster = broker_cluster(
        1,
        broker={"max_connections": 300, "metrics_port": metrics_port, "incomplete_request_timeout_ms": IDLE_TIMEOUT_MS},
    )
    broker = cluster.brokers[0]
    pid = broker.proc.pid
    good = WellBehaved(cluster.bootstrap).start()  # connected before the flood
    time.sleep(0.5)
    start = len(good.latencies)
    baseline_fds = open_fds(pid)
    idle: list[socket.socket] = []
    try:
        for _ in range(1000):
            idle.append(_connect(cluster.bootstrap[0]))
        opened = time.monotonic()
        peak_fds = open_fds(pid)
        for sock in idle:
            sock.settimeout(0)

        def closed(sock: socket.socket) -> bool:
            try:
                return sock.recv(1) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        open_now: list[socket.socket] = list(idle)

        def all_closed() -> bool:
            nonlocal peak_fds
            peak_fds = max(peak_fds, open_fds(pid))
            open_now[:] = [s for s in open_now if not closed(s)]
            return not open_now

        def refused_at_once() -> bool:
            all_closed()
            return 1000 - len(open_now) >= 650

        # well before the idle timeout could have closed any of them
        wait_until(refused_at_once, timeout=IDLE_TIMEOUT_MS / 2000, what="over 650 refused")
        settled_fds = open_fds(pid)
        refused = 1000 - len(open_now)
        assert refused >= 650, f"only {refused} of 1,000 refused with max_connections 300"
        wait_until(all_closed, timeout=15, what="idle connections dropped")
        dropped_after = time.monotonic() - opened
        p99 = good.check(start, at_least=5)
        print(
            f"\n1,000 idle connections: {refused} refused at once, the rest dropped within "
            f"{dropped_after:.1f}s (timeout {IDLE_TIMEOUT_MS / 1000:.0f}s); broker fds {baseline_fds} before, "
            f"{settled_fds} once the refused were closed (peak {peak_fds}, one accept burst); "
            f"well-behaved client p99 {p99 * 1000:.0f} ms"
        )
        assert dropped_after < 10
        # asyncio accepts a burst (up to the listen backlog) before the refused are closed
        assert settled_fds - baseline_fds <= 300 + 20
        assert p99 < 5.0

        def counted() -> bool:  # every close counted, as refused or as timed out
            seen = samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
            refused_total = value(seen, "logferry_connections_refused_total")
            timed_out = value(seen, "logferry_connections_timed_out_total")
            # the client's "refused" is what it saw closed before it looked again; the
            # broker's split between the two may differ at the edge (once, at a load of 8:
            # 298 timed out against the client's 1,000 - 678), the sum may not
            return refused_total >= 650 and refused_total + timed_out >= 1000

        wait_until(counted, timeout=10, what="the 1,000 closes counted as refused or timed out in the metrics")
        # and the broker takes new clients again
        with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
            assert consumer.offsets("good", 0).end > 0
    finally:
        for sock in idle:
            sock.close()
        good.stop()
    _assert_clean(cluster)


def test_frame_stalled_midway_is_dropped(broker_cluster):
    """A client that sends part of a frame and stops is closed after the timeout, and
    its reserved bytes go back to the budget."""
    cluster = broker_cluster(1, broker={"incomplete_request_timeout_ms": 1000})
    sock = _connect(cluster.bootstrap[0])
    try:
        sock.sendall(struct.pack(">II", 1000, 10) + b"x" * 100)
        sock.settimeout(10)
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1) == b""
        assert time.monotonic() - started < 5
    finally:
        sock.close()
    _assert_clean(cluster)
