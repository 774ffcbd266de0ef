"""benchmarks/delay_proxy.py: bytes arrive intact, in order, and each one late by the delay.

The proxy is part of the WAN benchmark (not the product), but a proxy that reordered,
lost or hurried bytes would make its figures lie.
"""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from benchmarks.delay_proxy import DelayProxy

pytestmark = pytest.mark.integration


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the proxy closed early"
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("delay_ms", [0.0, 20.0])
def test_bytes_cross_both_ways_intact_and_in_order(delay_ms: float) -> None:
    server, port = _echo_server()
    data = random.Random(1).randbytes(24 * 1024 * 1024)  # more than a pipe or a read holds
    with (
        server,
        DelayProxy([("127.0.0.1", port)], delay_ms) as proxy,
        socket.create_connection(("127.0.0.1", proxy.ports[("127.0.0.1", port)])) as sock,
    ):
        writer = threading.Thread(target=sock.sendall, args=(data,))
        writer.start()
        assert _read(sock, len(data)) == data
        writer.join()


def test_each_byte_is_late_by_the_delay_each_way() -> None:
    server, port = _echo_server()
    with (
        server,
        DelayProxy([("127.0.0.1", port)], 30.0) as proxy,
        socket.create_connection(("127.0.0.1", proxy.ports[("127.0.0.1", port)])) as sock,
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for size in (1, 100_000, 1):  # a small write after a large one waits no longer
            start = time.monotonic()
            sock.sendall(b"x" * size)
            _read(sock, size)
            assert time.monotonic() - start >= 0.060  # 30 ms there, 30 ms back


@pytest.mark.parametrize("relay", ["_delayed", "_delayed_splice"])
def test_both_delayed_relays_keep_order_and_delay(relay: str) -> None:
    """The portable ring-buffer relay (no splice) and the splice one, in this process."""
    from benchmarks import delay_proxy

    near, proxy_in = socket.socketpair()
    proxy_out, far = socket.socketpair()
    data = random.Random(2).randbytes(8 * 1024 * 1024)
    thread = threading.Thread(target=getattr(delay_proxy, relay), args=(proxy_in, proxy_out, 0.02), daemon=True)
    thread.start()
    start = time.monotonic()
    sender = threading.Thread(target=lambda: (near.sendall(data), near.shutdown(socket.SHUT_WR)))
    sender.start()
    first = _read(far, 1)
    assert time.monotonic() - start >= 0.02
    assert first + _read(far, len(data) - 1) == data
    sender.join()
    thread.join(5)
    assert not thread.is_alive()  # the end of the stream ends the relay
    for sock in (near, proxy_in, proxy_out, far):
        sock.close()
