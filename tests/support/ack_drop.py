"""A TCP proxy on 127.0.0.1 that loses produce acknowledgements on purpose.

One listener per broker forwards every byte from clients to that broker, and every
answer back, except that when armed (:meth:`AckDropProxy.drop_next`) it swallows the
next produce answer and cuts the connection: the broker appended the batch, the
producer never hears so and retries. Metadata answers are rewritten to name the
proxy's listeners instead of the brokers, so a client bootstrapped on the proxy keeps
talking through it, as it would to brokers behind a flaky network.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any

import msgpack

_PREFIX = struct.Struct(">II")


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


class AckDropProxy:
    """Fronts brokers ``host:port``; :attr:`addresses` are the proxy's, in the same order."""

    def __init__(self, brokers: list[str]):
        self._lock = threading.Lock()
        self._to_drop = 0
        self.dropped = 0
        """Produce answers swallowed so far."""
        self.dropped_event = threading.Event()
        self._listeners: list[socket.socket] = []
        self._map: dict[tuple[str, int], tuple[str, int]] = {}  # broker -> proxy listener
        self._closed = False
        self._socks: list[socket.socket] = []
        for broker in brokers:
            host, port = broker.rsplit(":", 1)
            listener = socket.create_server(("127.0.0.1", 0))
            self._listeners.append(listener)
            self._map[(host, int(port))] = listener.getsockname()[:2]
            threading.Thread(target=self._accept, args=(listener, (host, int(port))), daemon=True).start()

    @property
    def addresses(self) -> list[str]:
        return [f"{h}:{p}" for h, p in self._map.values()]

    def drop_next(self, n: int = 1) -> None:
        """Swallow the next ``n`` produce answers (each one cuts its connection)."""
        with self._lock:
            self._to_drop += n
            self.dropped_event.clear()

    def drop_all(self) -> None:
        """Swallow every produce answer until :meth:`stop_dropping`: the producer keeps
        retrying, and hears of none of its appends."""
        self.drop_next(1 << 60)

    def stop_dropping(self) -> None:
        with self._lock:
            self._to_drop = 0

    def close(self) -> None:
        self._closed = True
        for s in self._listeners + self._socks:
            _close(s)

    def __enter__(self) -> AckDropProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket, broker: tuple[str, int]) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(broker, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)  # the broker is down: so is the path through us
                continue
            self._socks += [client, upstream]
            threading.Thread(target=self._forward, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(1 << 16):
                upstream.sendall(data)
        except OSError:
            pass
        _close(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                prefix = _recv_exactly(upstream, _PREFIX.size)
                if prefix is None:
                    break
                size, header_len = _PREFIX.unpack(prefix)
                rest = _recv_exactly(upstream, size - 4)
                if rest is None:
                    break
                header: dict[str, Any] = msgpack.unpackb(rest[:header_len], raw=False, strict_map_key=False)
                if "parts" in header and self._take_drop():
                    break  # appended by the broker, never acknowledged: cut the connection
                if isinstance(header.get("brokers"), dict):
                    client.sendall(self._rewritten(header, rest[header_len:]))
                else:
                    client.sendall(prefix + rest)
        except OSError:
            pass
        _close(client, upstream)

    def _take_drop(self) -> bool:
        with self._lock:
            if self._to_drop <= 0:
                return False
            self._to_drop -= 1
            self.dropped += 1
            self.dropped_event.set()
            return True

    def _rewritten(self, header: dict[str, Any], payload: bytes) -> bytes:
        for entry in header["brokers"].values():
            mapped = self._map.get((entry[0], entry[1]))
            if mapped is not None:
                entry[0], entry[1] = mapped
        head = msgpack.packb(header, use_bin_type=True)
        return _PREFIX.pack(4 + len(head) + len(payload), len(head)) + head + payload
