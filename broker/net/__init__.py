"""Transport: the one place that opens sockets (listeners and client connections).

:mod:`broker.net.transport` opens them for each IO style (asyncio listener, blocking
client, asyncio client stream) and is where an ``ssl.SSLContext`` plugs in;
:mod:`broker.net.socket_errors` maps socket and TLS failures to
:mod:`broker.common.errors`; :mod:`broker.net.tls_socket` makes TLS safe for the
client's one-reader, many-writers connection.
"""

from broker.net.transport import BlockingStream, connect, open_stream, start_server

__all__ = ["BlockingStream", "connect", "open_stream", "start_server"]
