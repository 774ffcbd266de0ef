"""The HTTP endpoint of a :class:`~broker.common.metrics.Metrics`: only for a process with a metrics port.

:class:`MetricsServer` serves a :class:`~broker.common.metrics.Metrics` over HTTP with
prometheus_client's WSGI app (content negotiation, gzip, ``name[]`` filters) under the
standard library's threading WSGI server, on a daemon thread, plus optional extra routes
(the agent's ``/status``). An asyncio owner (the broker) passes its loop: every scrape
then reads the owner's state on that loop, as the owner's own code does, never from
another thread. prometheus_client and the HTTP server cost a process start ~50 ms to
import: an owner imports this module where it starts the server, when a port is
configured, never at the top.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import Metric

from broker.common.errors import MetricsError
from broker.common.metrics import Metrics

log = logging.getLogger("logferry.metrics")

COLLECT_TIMEOUT_S = 5.0
"""A scrape waits this long for the owner's event loop before answering 500."""


def _registry(collector: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class _OnLoop:
    """A collector that gathers ``metrics`` on an asyncio loop (the owner's thread)."""

    def __init__(self, metrics: Metrics, loop: asyncio.AbstractEventLoop):
        self.metrics = metrics
        self.loop = loop

    def collect(self) -> list[Metric]:
        future: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def gather() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self.metrics.collect())
                except BaseException as exc:  # handed to the scraping thread
                    future.set_exception(exc)

        self.loop.call_soon_threadsafe(gather)
        return future.result(COLLECT_TIMEOUT_S)


Route = Callable[[], tuple[str, bytes]]
"""An extra endpoint: returns ``(content type, body)``."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper never holds the process open
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, on the request's own thread, bounded like the
        # request itself: a client that connects and never speaks holds no other scrape.
        if self.ssl_context is not None:
            request.settimeout(_QuietHandler.timeout)
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a failed handshake (a plaintext scraper on the TLS port) or a client gone
        # away: nothing for the log above DEBUG, and never a traceback on stderr
        log.debug("metrics request from %s failed", client_address, exc_info=True)


class _QuietHandler(WSGIRequestHandler):
    timeout = 5  # seconds a client may take to send its request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # scrapes every few seconds would flood the log


class MetricsServer:
    """Serve ``metrics`` at ``http://host:port/metrics`` from a daemon thread.

    ``routes`` adds endpoints (path -> function returning content type and body); with
    routes, other paths answer 404, without, every path answers the metrics (as
    prometheus_client's own server does). ``loop``: collect on that event loop.
    ``port`` 0 takes a free port (see :attr:`port`). Raises :class:`MetricsError`
    when the address cannot be bound. ``ssl_context`` (a server context, see
    :func:`broker.common.tls.server_context`) serves ``https://`` instead.
    """

    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        routes: Mapping[str, Route] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        name: str = "metrics",
        ssl_context: ssl.SSLContext | None = None,
    ):
        app = make_wsgi_app(_registry(metrics if loop is None else _OnLoop(metrics, loop)))
        routes = dict(routes or {})

        def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path in routes:
                kind, body = routes[path]()
                start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
                return [body]
            if routes and path != "/metrics":
                body = f"try {' or '.join(['/metrics', *routes])}\n".encode()
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [body]
            answer: Iterable[bytes] = app(environ, start_response)
            return answer

        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            server_class = type("MetricsHTTPServer", (_Server,), {"address_family": family})
            self._httpd = server_class((host, port), _QuietHandler)
        except OSError as exc:
            raise MetricsError(f"cannot serve metrics on {host}:{port} ({exc.strerror or exc})") from None
        self._httpd.set_app(dispatch)
        self._httpd.ssl_context = ssl_context
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self.url = f"{'https' if ssl_context else 'http'}://{host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,), name=name, daemon=True)
        self._thread.start()
        log.info("metrics served on %s/metrics", self.url)

    def close(self) -> None:
        """Stop serving and release the port (returns within about 0.1 s)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


__all__ = ["MetricsServer", "Route"]
