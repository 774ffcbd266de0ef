"""Every socket logferry opens to carry data or control, for each IO style it uses.

- :func:`start_server`: the broker's asyncio listener (an ``asyncio.Protocol`` per
  connection).
- :func:`connect`: a blocking client socket (the client library's connection, one
  reader thread and many writer threads).
- :func:`open_stream`: an asyncio client stream (a follower's fetcher to its leader).

Each accepts an optional ``ssl.SSLContext``: ``None`` (the default) is plaintext TCP,
exactly what the callers did before; a context turns on TLS for that socket, with the
client verifying the server's certificate against ``server_hostname`` (the host by
default). Building contexts from configuration (CA files, client certificates) is the
caller's business; passing them through is this module's. Failures come out as
:mod:`broker.common.errors` with the peer's ``host:port`` in the message (see
:mod:`broker.net.socket_errors`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Protocol

from broker.net import socket_errors
from broker.net.tls_accept import Admit, gate_factory
from broker.net.tls_socket import wrap_client


class BlockingStream(Protocol):
    """What :func:`connect` returns: a plain socket, or a :class:`TlsSocket`."""

    def sendall(self, data: bytes | bytearray | memoryview, /) -> None: ...
    def recv_into(self, buffer: bytearray | memoryview, /) -> int: ...
    def settimeout(self, timeout: float | None, /) -> None: ...
    def shutdown(self, how: int, /) -> None: ...
    def close(self) -> None: ...


def connect(
    host: str,
    port: int,
    *,
    timeout: float | None = 10.0,
    io_timeout: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    peer: str = "broker",
) -> BlockingStream:
    """Open a blocking TCP connection to ``host:port`` (with TCP_NODELAY).

    ``timeout`` bounds the connect and the TLS handshake; afterwards the socket's
    timeout is ``io_timeout`` (``None``: reads block until data or close). With
    ``ssl_context`` the connection is TLS and may be read by one thread while others
    write (see :mod:`broker.net.tls_socket`). Raises ``BrokerNotAvailableError`` (or
    its ``TlsHandshakeError``) naming ``host:port``; ``peer`` names what is at the other
    end in those messages.
    """
    hostname = _server_hostname(host, ssl_context, server_hostname)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise socket_errors.connect_error(exc, host, port, timeout, peer) from None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream: BlockingStream = sock
        if ssl_context is not None:
            stream = wrap_client(sock, ssl_context, hostname)
        stream.settimeout(io_timeout)
        return stream
    except OSError as exc:  # ssl.SSLError is an OSError too
        sock.close()
        raise socket_errors.connect_error(exc, host, port, timeout, peer, hostname) from None


async def open_stream(
    host: str,
    port: int,
    *,
    timeout: float | None = 10.0,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    peer: str = "broker",
    limit: int = 2**16,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open an asyncio stream to ``host:port``; ``timeout`` bounds connect and handshake.

    Uses ``asyncio.timeout``, not ``wait_for``: in Python 3.11, ``wait_for`` can lose a
    cancellation that arrives as the connection completes, and a task that misses its
    cancellation keeps a stopping broker alive. Raises ``BrokerNotAvailableError`` (or
    ``TlsHandshakeError``) naming ``host:port``.
    """
    hostname = _server_hostname(host, ssl_context, server_hostname)
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(host, port, ssl=ssl_context, server_hostname=hostname, limit=limit)
    except (OSError, TimeoutError) as exc:  # asyncio.TimeoutError is TimeoutError in 3.11
        raise socket_errors.connect_error(exc, host, port, timeout, peer, hostname) from None


async def start_server(
    protocol_factory: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
    backlog: int = 1024,
    start_serving: bool = True,
    admit: Admit | None = None,
) -> asyncio.Server:
    """Listen on ``host:port`` and serve each connection with a new protocol object.

    With ``ssl_context`` (a server context holding the certificate chain) every
    connection is TLS; the protocol's ``connection_made`` runs after the handshake, and
    a client that fails it never reaches the protocol (asyncio logs it). Raises
    ``ListenError`` with what to change when the address cannot be bound.
    ``ssl_handshake_timeout`` (seconds, TLS only; asyncio's default is 60) drops a client
    that connects and never finishes its handshake.
    ``start_serving=False`` only binds: call :func:`start_serving` to listen.
    ``admit`` (TLS only) is asked at accept, before the handshake, with the number of
    handshakes in progress; False closes the connection at once, so connections still
    in their handshake count against a connection limit (:mod:`broker.net.tls_accept`).
    """
    loop = asyncio.get_running_loop()
    if ssl_context is not None:
        protocol_factory = gate_factory(protocol_factory, ssl_context, ssl_handshake_timeout, admit)
    try:
        return await loop.create_server(
            protocol_factory, host, port, reuse_address=True, backlog=backlog, start_serving=start_serving
        )
    except OSError as exc:
        raise socket_errors.listen_error(exc, host, port) from None


async def start_serving(server: asyncio.Server, host: str, port: int) -> None:
    """Listen and accept on a server bound with ``start_serving=False``. Raises
    ``ListenError`` if another socket bound the port meanwhile took it first (two
    sockets with SO_REUSEADDR may both bind a port; only one may listen)."""
    try:
        await server.start_serving()
    except OSError as exc:
        raise socket_errors.listen_error(exc, host, port) from None


def _server_hostname(host: str, ssl_context: ssl.SSLContext | None, server_hostname: str | None) -> str | None:
    """The name to verify the server's certificate against: only with TLS."""
    if ssl_context is None:
        if server_hostname is not None:
            raise ValueError("server_hostname is only meaningful with an ssl_context")
        return None
    return server_hostname if server_hostname is not None else host


__all__ = ["BlockingStream", "connect", "open_stream", "start_server", "start_serving"]
