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
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from typing import Callable

log = logging.getLogger("logferry.net")

Admit = Callable[[int], bool]
"""Asked at accept with the number of handshakes in progress; False refuses."""


class HandshakeCounter:
    """Handshakes in progress on one listener."""

    def __init__(self) -> None:
        self.in_progress = 0


class TlsGate(asyncio.Protocol):
    """The first protocol of an accepted TCP connection on a TLS listener."""

    def __init__(self, app_factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext,
                 timeout: float | None, admit: Admit | None, counter: HandshakeCounter):
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
        tls = sslproto.SSLProtocol(loop, self._app_factory(), self._context, waiter,
                                   server_side=True,
                                   ssl_handshake_timeout=self._timeout)  # type: ignore[arg-type]  # seconds, a float (typeshed says int)
        self._counter.in_progress += 1
        waiter.add_done_callback(lambda done: self._finished(done, transport))
        transport.set_protocol(tls)
        tls.connection_made(transport)

    def _finished(self, waiter: "asyncio.Future[None]", transport: asyncio.Transport) -> None:
        self._counter.in_progress -= 1
        exc = None if waiter.cancelled() else waiter.exception()
        if exc is not None:  # the TLS layer has closed it; asyncio would log it, we say little
            log.debug("TLS handshake with %s failed: %s", transport.get_extra_info("peername"), exc)
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # before the handshake began; afterwards the TLS layer owns the transport

    def data_received(self, data: bytes) -> None:  # pragma: no cover - never: switched at once
        pass


def gate_factory(app_factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext,
                 timeout: float | None, admit: Admit | None) -> Callable[[], TlsGate]:
    """The listener's protocol factory: one gate per accepted connection, one counter
    for the listener."""
    counter = HandshakeCounter()
    return lambda: TlsGate(app_factory, context, timeout, admit, counter)


__all__ = ["Admit", "HandshakeCounter", "TlsGate", "gate_factory"]
