"""A broker connection's guards, driven without sockets: the request budget, unsent
answers, the stalled-request timeout and max_connections. A stand-in transport records
whether the connection reads; a stand-in dispatcher records the requests it gets."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import defaultdict
from types import SimpleNamespace

from broker.common.ratelimit import RateLimitedLog
from broker.server.native import connection as native_connection
from broker.server.native.connection import BrokerConnection, close_stalled, fd_limit_warning
from broker.server.request_budget import RequestBudget
from broker.wire import protocol


class Transport:
    """What the connection uses of an asyncio transport."""

    def __init__(self) -> None:
        self.reading = True
        self.aborted = False
        self.written: list[bytes] = []

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.high = high

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


class Dispatcher:
    """Produce runs at once; other apis wait for ``release`` (a long poll)."""

    def __init__(self) -> None:
        self.produced: list[int] = []
        self.release = asyncio.Event()

    def is_synchronous(self, head) -> bool:
        return head.api == protocol.PRODUCE

    def handle_produce(self, head, frame, responder) -> None:
        self.produced.append(head.correlation_id)

    async def handle(self, head, frame, responder) -> None:
        await self.release.wait()


def _broker(budget: int = 1000, max_unsent: int = 100, max_connections: int = 10):
    return SimpleNamespace(
        config=SimpleNamespace(
            max_request_bytes=1 << 20, max_unsent_bytes_per_connection=max_unsent, max_connections=max_connections
        ),
        request_budget=RequestBudget(budget),
        connections=set(),
        dispatcher=Dispatcher(),
        stats=SimpleNamespace(
            connections_refused=defaultdict(int), connections_timed_out=defaultdict(int), read_holds=defaultdict(int)
        ),
        count_request=lambda *args, **kwargs: None,
        authenticator=None,
    )


def _connect(broker) -> tuple[BrokerConnection, Transport]:
    conn = BrokerConnection(broker)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _produce(corr: int, payload: int) -> bytes:
    return protocol.encode_request(protocol.PRODUCE, corr, {"acks": 1, "parts": []}, payload) + bytes(payload)


def test_a_frame_waits_for_the_budget_without_reading_then_resumes():
    async def scenario():
        broker = _broker(budget=1000)
        conn, transport = _connect(broker)
        broker.request_budget.try_reserve(900)  # someone else's big request
        frame = _produce(1, 500)
        conn.data_received(frame[:100])
        assert not transport.reading and conn.held
        assert broker.stats.read_holds[(("reason", "budget"),)] == 1
        broker.request_budget.release(900)
        await asyncio.sleep(0)
        assert transport.reading and not conn.held
        assert broker.request_budget.reserved == len(frame)  # reserved before buffering
        conn.data_received(frame[100:])
        assert broker.dispatcher.produced == [1]
        assert broker.request_budget.reserved == 0
        assert conn.stalled_since is None

    asyncio.run(scenario())


def test_small_frames_pass_while_the_budget_is_mostly_taken():
    async def scenario():
        broker = _broker(budget=1000)
        conn, transport = _connect(broker)
        broker.request_budget.try_reserve(800)
        conn.data_received(_produce(1, 50) + _produce(2, 50))
        assert broker.dispatcher.produced == [1, 2] and transport.reading

    asyncio.run(scenario())


def test_unsent_answers_over_the_limit_stop_reading_until_drained():
    async def scenario():
        broker = _broker(max_unsent=100)
        conn, transport = _connect(broker)
        assert transport.high == 100
        conn.pause_writing()  # the transport's buffer went over the limit
        conn.data_received(_produce(1, 10) + _produce(2, 10))
        assert broker.dispatcher.produced == [] and not transport.reading
        assert broker.stats.read_holds[(("reason", "unsent"),)] == 1
        conn.resume_writing()
        await asyncio.sleep(0)
        assert broker.dispatcher.produced == [1, 2] and transport.reading

    asyncio.run(scenario())


def test_a_closed_connection_gives_back_its_reservation_and_its_wait():
    async def scenario():
        broker = _broker(budget=1000)
        partial, _ = _connect(broker)
        waiting, _ = _connect(broker)
        partial.data_received(_produce(1, 600)[:50])
        waiting.data_received(_produce(2, 600)[:50])
        assert broker.request_budget.reserved > 600 and broker.request_budget.waiting == 1
        waiting.connection_lost(None)
        assert broker.request_budget.waiting == 0
        partial.connection_lost(None)
        assert broker.request_budget.reserved == 0

    asyncio.run(scenario())


def test_stalled_connections_are_closed_but_idle_and_held_ones_are_kept():
    async def scenario():
        broker = _broker(budget=100)
        silent, silent_t = _connect(broker)
        idle, idle_t = _connect(broker)
        idle.data_received(_produce(1, 10))  # a whole request: owes nothing now
        held, held_t = _connect(broker)
        broker.request_budget.try_reserve(100)
        held.data_received(_produce(2, 50)[:20])  # waits for the budget: not its fault
        later = time.monotonic() + 60
        assert close_stalled(broker.connections, later, 30.0) == 1
        assert silent_t.aborted and not idle_t.aborted and not held_t.aborted
        assert broker.stats.connections_timed_out[()] == 1
        assert silent.stalled_since is not None and idle.stalled_since is None

    asyncio.run(scenario())


def test_connections_over_max_connections_are_refused():
    async def scenario():
        broker = _broker(max_connections=2)
        conns = [_connect(broker) for _ in range(3)]
        assert [t.aborted for _, t in conns] == [False, False, True]
        assert len(broker.connections) == 2
        assert broker.stats.connections_refused[()] == 1
        conns[2][0].connection_lost(None)
        assert len(broker.connections) == 2

    asyncio.run(scenario())


def test_whole_frames_skip_the_budget_but_background_ones_count_until_answered():
    async def scenario():
        broker = _broker(budget=1000)
        conn, _ = _connect(broker)
        conn.data_received(_produce(1, 300))
        assert broker.dispatcher.produced == [1] and broker.request_budget.reserved == 0
        fetch = protocol.encode_request(protocol.METADATA, 2, {"topics": []}, 200) + bytes(200)
        conn.data_received(fetch)
        held = broker.request_budget.reserved
        assert len(fetch) - 8 <= held <= len(fetch)
        broker.dispatcher.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert broker.request_budget.reserved == 0 and not conn.tasks

    asyncio.run(scenario())


def test_warns_when_max_connections_cannot_fit_in_the_open_file_limit():
    assert fd_limit_warning(4096, 100_000) is None
    assert fd_limit_warning(4096, -1) is None  # RLIM_INFINITY
    warning = fd_limit_warning(4096, 1024)
    assert warning is not None and "max_connections (4096)" in warning and "1024" in warning


def test_closes_for_oversized_frames_are_logged_at_a_bounded_rate(monkeypatch, caplog):
    """A client that reconnects and sends the same oversized frame 317 times in a minute
    (the Kafka listener's case in issue 35) writes 6 lines, each counting the muted ones;
    every attempt is still answered with the error and closed."""
    now = [0.0]
    limiter = RateLimitedLog(
        logging.getLogger("logferry.connection"), 10.0, "more connections closed so since the last line", lambda: now[0]
    )
    monkeypatch.setattr(native_connection, "_closes", limiter)
    broker = _broker()
    oversized = struct.pack(">I", broker.config.max_request_bytes + 1) + b"\0" * 8

    async def attempts() -> None:
        for i in range(317):
            now[0] = i * 60.0 / 317
            conn, transport = _connect(broker)
            conn.data_received(oversized)
            assert transport.aborted and transport.written, i  # answered, then closed
            conn.connection_lost(None)

    with caplog.at_level(logging.WARNING, logger="logferry.connection"):
        asyncio.run(attempts())
    lines = [r.getMessage() for r in caplog.records if "closing connection from" in r.getMessage()]
    assert len(lines) == 6
    assert "frame of 1048577 bytes exceeds" in lines[0], lines[0]
    muted = sum(int(line.rsplit("(", 1)[1].split()[0]) for line in lines[1:])
    assert muted == 317 - 6 - limiter._suppressed.get("FrameTooLargeError", 0)
