"""Server-side TLS that starts after the broker admits a connection.

asyncio's ``create_server(ssl=...)`` hands a connection to its protocol only after the
TLS handshake: until then the application neither sees nor counts it, so clients that
connect and never finish (or never start) their handshake hold descriptors that no
connection limit covers; 1,000 of them held 1,000 descriptors of a broker capped at
300 connections. Here the listener is plain TCP and each accepted socket first meets a
:class:`TlsGate`: it asks ``admit`` (given the handshakes in progress) whether to take
the connection, closes it at once when not, and otherwise runs the handshake with
asyncio's own TLS protocol (bounded by the handshake timeout), which gives the
application's protocol ``connection_made`` with the TLS transport, as with ``ssl=``.

An application protocol whose ``data_received`` copies what it keeps before it returns
says so with a true ``data_received_copies`` attribute; it is then given views of one
reused buffer that OpenSSL decrypts into (:class:`ReusedBufferReader`), not a fresh
bytes object per 16 KiB TLS record joined into another per read.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable

log = logging.getLogger("logferry.net")

Admit = Callable[[int], bool]
"""Asked at accept with the number of handshakes in progress; False refuses."""


class HandshakeCounter:
    """Handshakes in progress on one listener."""

    def __init__(self) -> None:
        self.in_progress = 0


class TlsGate(asyncio.Protocol):
    """The first protocol of an accepted TCP connection on a TLS listener."""

    def __init__(
        self,
        app_factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
        timeout: float | None,
        admit: Admit | None,
        counter: HandshakeCounter,
    ):
        self._app_factory = app_factory
        self._context = context
        self._timeout = timeout
        self._admit = admit
        self._counter = counter

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._admit is not None and not self._admit(self._counter.in_progress):
            transport.abort()
            return
        # What the loop does for ``create_server(ssl=...)`` (not ``loop.start_tls``,
        # which returns the TLS transport only after the client's first request may
        # have reached the protocol): the TLS layer calls ``connection_made`` itself.
        # Switched before this returns, so the ClientHello goes to the TLS layer.
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        app = self._app_factory()
        if getattr(app, "data_received_copies", False):
            app = ReusedBufferReader(app)  # type: ignore[arg-type]
        # the type: ignore on its argument's own line, where `ruff format` keeps it
        tls = sslproto.SSLProtocol(
            loop,
            app,
            self._context,
            waiter,
            server_side=True,
            ssl_handshake_timeout=self._timeout,  # type: ignore[arg-type]  # seconds, a float (typeshed: int)
        )
        self._counter.in_progress += 1
        waiter.add_done_callback(lambda done: self._finished(done, transport))
        transport.set_protocol(tls)
        tls.connection_made(transport)

    def _finished(self, waiter: asyncio.Future[None], transport: asyncio.Transport) -> None:
        self._counter.in_progress -= 1
        exc = None if waiter.cancelled() else waiter.exception()
        if exc is not None:  # the TLS layer has closed it; asyncio would log it, we say little
            log.debug("TLS handshake with %s failed: %s", transport.get_extra_info("peername"), exc)
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # before the handshake began; afterwards the TLS layer owns the transport

    def data_received(self, data: bytes) -> None:  # pragma: no cover - never: switched at once
        pass


RECEIVE_BUFFER_BYTES = 256 * 1024
"""Plaintext bytes decrypted per ``data_received`` at most (asyncio's TLS layer reads
as much ciphertext per socket read)."""


class ReusedBufferReader(asyncio.BufferedProtocol):
    """Puts a buffer-reading face on an ``asyncio.Protocol`` for asyncio's TLS layer.

    Given a plain protocol, the TLS layer decrypts each record into a new bytes object
    and joins them for ``data_received``; given a buffered one, it decrypts into the
    buffer. This one lends one buffer and passes each filled part to the wrapped
    protocol's ``data_received`` as a memoryview, valid only during that call (so only
    for protocols with ``data_received_copies``). Every other event goes through.
    """

    def __init__(self, app: asyncio.Protocol, size: int = RECEIVE_BUFFER_BYTES):
        self.app = app
        self._size = size
        self._view: memoryview | None = None
        """Made at the first read and dropped at close: the connection's objects form
        reference cycles that only the garbage collector frees, and a storm of short
        connections must not leave one buffer each waiting for it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.app.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._view is None:
            self._view = memoryview(bytearray(self._size))
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        assert self._view is not None  # get_buffer came first
        self.app.data_received(self._view[:nbytes])  # type: ignore[arg-type]

    def eof_received(self) -> bool | None:
        return self.app.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._view = None
        self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        self.app.pause_writing()

    def resume_writing(self) -> None:
        self.app.resume_writing()


def gate_factory(
    app_factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext, timeout: float | None, admit: Admit | None
) -> Callable[[], TlsGate]:
    """The listener's protocol factory: one gate per accepted connection, one counter
    for the listener."""
    counter = HandshakeCounter()
    return lambda: TlsGate(app_factory, context, timeout, admit, counter)


__all__ = ["Admit", "HandshakeCounter", "ReusedBufferReader", "TlsGate", "gate_factory"]
