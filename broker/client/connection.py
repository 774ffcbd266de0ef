"""A blocking, pipelined connection from a client to one broker.

Requests are written under a lock by whichever thread sends them; one reader thread per
connection decodes response frames with the sans-IO :class:`FrameDecoder` and
completes the matching :class:`ResponseFuture` by correlation id. Many requests may be
in flight at once; a broken connection fails every pending request with
:class:`BrokerNotAvailableError` so callers can retry elsewhere.

A connection made with ``reader_thread=False`` has no reader thread: the thread that
waits for a response (:meth:`ResponseFuture.result`) reads the socket itself, under a
read lock, completing whatever answers arrive on the way. That saves the hand-off from
the reader thread to the waiting one (a thread wake-up, 35 us and more, traced) and is
meant for a connection one thread uses at a time, such as a following consumer's.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from broker.common.errors import (
    BrokerNotAvailableError,
    LogferryError,
    RequestTimedOutError,
    error_for_code,
)
from broker.common.sasl import SaslCredentials
from broker.net import socket_errors, transport
from broker.net.sasl_client import authenticate_socket
from broker.net.tls_socket import TlsSocket
from broker.wire import protocol
from broker.wire.apis import connection_error

log = logging.getLogger("logferry.client")

RECV_BYTES = 4 * 1024 * 1024
IDLE_READ_S = 0.0005
"""A read that waited this long for its bytes found the connection idle: a frame that
starts with them was not queued behind another answer (see ResponseFuture.after_idle)."""


class ResponseFuture:
    """The eventual response frame of one request (or its error)."""

    __slots__ = ("_lock", "frame", "error", "callback", "first_byte_at", "after_idle", "connection")

    def __init__(self, connection: Connection | None = None) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self.frame: protocol.Frame | None = None
        self.error: LogferryError | None = None
        self.callback: Callable[[ResponseFuture], None] | None = None
        self.first_byte_at = 0.0
        """``time.monotonic()`` when the response's first bytes were read (0: none yet)."""
        self.after_idle = False
        """True if those bytes came after the connection had been idle (the read waited
        for them), so ``first_byte_at - sent`` is the round trip and not a wait behind
        other answers on this connection (the fetch window's latency sample)."""
        self.connection = connection
        """The connection whose socket :meth:`result` reads (one without a reader
        thread), else None."""

    def _finish(self, frame: protocol.Frame | None, error: LogferryError | None) -> None:
        self.frame = frame
        self.error = error
        self._lock.release()
        if self.callback is not None:
            try:
                self.callback(self)
            except Exception:  # a callback bug must not kill the reader thread
                log.exception("response callback failed")

    def done(self) -> bool:
        return self.frame is not None or self.error is not None

    def result(self, timeout: float | None = None) -> protocol.Frame:
        """Wait for the frame; raise the transport error or the response's error code."""
        if self.connection is not None and not self.done():
            self.connection.read_until(self, timeout)
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise RequestTimedOutError(f"no response within {timeout:.1f}s")
        self._lock.release()
        if self.error is not None:
            raise self.error
        frame = self.frame
        assert frame is not None
        code = frame.header.get("err", 0)
        if code:
            raise error_for_code(code, frame.header.get("msg", ""))
        return frame


class Connection:
    """One TCP connection to a broker, shared by the threads of a client."""

    def __init__(
        self,
        host: str,
        port: int,
        connect_timeout: float = 10.0,
        max_frame_bytes: int = 512 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        sasl: SaslCredentials | None = None,
        reader_thread: bool = True,
    ):
        """Connect (TLS with ``ssl_context``, verifying ``server_hostname`` or ``host``),
        then authenticate with ``sasl`` (AuthenticationError when refused).
        ``reader_thread`` False: responses are read by the threads waiting for them
        (see the module docstring); plaintext only (under TLS a reader thread runs)."""
        self.address = f"{host}:{port}"
        self._tls = ssl_context is not None
        self._sock = transport.connect(
            host, port, timeout=connect_timeout, ssl_context=ssl_context, server_hostname=server_hostname
        )
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._pending: dict[int, ResponseFuture] = {}
        self._decoder = protocol.FrameDecoder(max_frame_bytes)
        if sasl is not None:
            try:
                authenticate_socket(self._sock, self._decoder, sasl, self.address, connect_timeout, self._ids)
            except BaseException:
                self._sock.close()
                raise
        self.closed = False
        self._close_reason: LogferryError | None = None
        self._first = True
        self._buf: memoryview | None = None
        self._frame_started = 0.0  # when the frame being read began arriving (monotonic)
        self._frame_after_idle = False  # and whether the read had waited for it
        self._read_lock = threading.Lock()
        # Plain sockets only: a TLS stream may hold decrypted bytes no poll would show.
        self._inline = not reader_thread and type(self._sock) is socket.socket
        if not self._inline:
            self._reader = threading.Thread(target=self._read_loop, daemon=True, name=f"logferry-reader-{self.address}")
            self._reader.start()

    def request(
        self,
        api: int,
        fields: dict[str, Any],
        payload: Sequence[bytes | memoryview] = (),
        expect_response: bool = True,
        callback: Callable[[ResponseFuture], None] | None = None,
    ) -> ResponseFuture | None:
        """Send one request; return its future, or None when no response will come.

        ``callback`` runs in the reader thread when the response (or a connection
        error) arrives; it is attached before the request is written, so a fast
        response can never miss it.
        """
        size = sum(map(len, payload))
        future = ResponseFuture(self if self._inline else None) if expect_response else None
        if future is not None:
            future.callback = callback
        with self._send_lock:
            if self.closed:
                raise self._close_reason or BrokerNotAvailableError(f"connection to {self.address} is closed")
            corr = next(self._ids)
            head = protocol.encode_request(api, corr, fields, size)
            if future is not None:
                self._pending[corr] = future
            try:
                if payload and size >= GATHER_MIN_PART * len(payload):
                    if type(self._sock) is socket.socket:
                        _send_parts(self._sock, [head, *payload])  # no copy of the batches
                    elif isinstance(self._sock, TlsSocket):
                        self._sock.sendall_parts([head, *payload])  # nor a fresh joined one
                    else:
                        self._sock.sendall(b"".join((head, *payload)))
                elif payload:
                    self._sock.sendall(b"".join((head, *payload)))
                else:
                    self._sock.sendall(head)
            except OSError as exc:
                self._pending.pop(corr, None)
                self._fail(socket_errors.lost_error(exc, self.address, during="failed"))
                raise self._close_reason from None  # type: ignore[misc]
            if self.closed and future is not None and self._pending.pop(corr, None):
                # The reader failed between our check and our registration.
                raise self._close_reason or BrokerNotAvailableError(f"connection to {self.address} is closed")
        return future

    def call(self, api: int, fields: dict[str, Any], timeout: float = 30.0) -> protocol.Frame:
        """Send a request and wait for its successful response frame."""
        future = self.request(api, fields)
        assert future is not None
        return future.result(timeout)

    def _read_loop(self) -> None:
        try:
            while True:
                self._read_once()
        except LogferryError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(socket_errors.lost_error(exc, self.address))

    def _read_once(self) -> None:
        """One blocking read; complete the futures of the whole frames it finished."""
        view = self._buf
        if view is None:
            view = self._buf = memoryview(bytearray(RECV_BYTES))
        before = time.monotonic()
        n = self._sock.recv_into(view)
        now = time.monotonic()
        decoder = self._decoder
        if not decoder.buffered:  # these bytes begin a frame
            self._frame_started, self._frame_after_idle = now, now - before >= IDLE_READ_S
        first, self._first = self._first, False
        if first and socket_errors.looks_like_tls(view[:n]):
            raise socket_errors.tls_expected_error(self.address)
        if n == 0 and first:  # closed before its first answer: say what may be why
            raise (
                socket_errors.tls_rejected_error(self.address)
                if self._tls
                else socket_errors.tls_expected_error(self.address, answered=False)
            )
        if n == 0:
            raise ConnectionResetError("broker closed the connection")
        decoder.feed(view[:n])
        while True:
            frame = decoder.next_frame()
            if frame is None:
                break
            corr = frame.header.get("id")
            future = self._pending.pop(corr, None) if corr is not None else None
            if future is not None:
                future.first_byte_at = self._frame_started
                future.after_idle = self._frame_after_idle
                future._finish(frame, None)
            elif frame.header.get("err"):
                # An error for the connection as a whole (bad frame): it closes.
                raise connection_error(frame.header)
            # what follows came right behind it
            self._frame_started, self._frame_after_idle = now, False

    def read_until(self, future: ResponseFuture, timeout: float | None) -> None:
        """Without a reader thread: read the socket in this thread until ``future`` is
        done or ``timeout`` seconds passed (then return; :meth:`ResponseFuture.result`
        raises). A connection error fails every pending request, as the reader would."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0)
        if not self._read_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            return
        try:
            poller = select.poll()
            poller.register(cast(socket.socket, self._sock), select.POLLIN)  # plain: __init__
            while not future.done() and not self.closed:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return
                if poller.poll(None if wait is None else max(1, int(wait * 1000))):
                    self._read_once()
        except LogferryError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(socket_errors.lost_error(exc, self.address))
        finally:
            self._read_lock.release()

    def _fail(self, error: LogferryError) -> None:
        if not self.closed:
            self.closed = True
            self._close_reason = error
            with contextlib.suppress(OSError):
                self._sock.close()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            future._finish(None, error)

    def close(self) -> None:
        """Close the socket; pending requests fail."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._fail(BrokerNotAvailableError(f"connection to {self.address} was closed"))

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)


GATHER_MIN_PART = 8192
"""Payload parts this large on average are written as they are (:func:`_send_parts`;
under TLS staged, ``TlsSocket.sendall_parts``); many small ones (one-message batches)
are cheaper joined into one buffer, in C, than walked part by part in Python."""
IOV_MAX = 1024
"""Most buffers one ``sendmsg`` call takes (Linux's UIO_MAXIOV)."""


def _send_parts(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    """Write ``parts`` one after another with scatter-gather ``sendmsg``, no joining.

    A produce request's batches are large and fresh; joining them would copy them into
    yet another fresh buffer (page faults included) for every request.
    """
    views = [memoryview(p) for p in parts]
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i : i + IOV_MAX])
        while i < len(views) and sent >= len(views[i]):  # drop what was written
            sent -= len(views[i])
            i += 1
        if sent:  # a part half written: keep its rest
            views[i] = views[i][sent:]
