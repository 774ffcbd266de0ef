"""One client connection on the broker: frames in, responses out, in a safe order.

The connection feeds received bytes to the sans-IO :class:`FrameDecoder`, reads each
request's head, and hands the frame with a :class:`Responder` to the broker's
dispatcher; handlers never see the connection. Produce requests are handled synchronously in
``data_received`` so appends keep the order in which a client sent them; fetch and
admin requests run as tasks and may answer out of order (clients match responses by
correlation id). Responses go through one writer so a sendfile of log bytes is never
interleaved with another response.

Memory stays bounded whatever a client does (see ``docs/operations.md``, "Abusive
clients"): a request that takes more than one read reserves its whole size from the
broker-wide :class:`RequestBudget` as soon as its frame prefix arrives, and the
connection stops reading while the budget is short; it also stops reading new requests while its unsent answers exceed
``max_unsent_bytes_per_connection`` or too many of its requests are in flight, and
resumes once they drain. A connection that owes the rest of a request (or its first
one), or has not authenticated where the broker requires it, for
``incomplete_request_timeout_ms`` is closed by :func:`close_stalled`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from broker.common.errors import (
    FrameTooLargeError,
    InvalidRequestError,
    LogferryError,
    ProtocolError,
    UnsupportedApiError,
)
from broker.common.principal import ANONYMOUS, Principal
from broker.common.ratelimit import RateLimitedLog
from broker.net import socket_errors
from broker.server.listeners import DEFAULT_LISTENER
from broker.server.native.sasl import ConnectionAuth
from broker.server.native.tls_send import send_file_range
from broker.server.services.responder import FileReply, Responder
from broker.wire import protocol
from broker.wire.apis import parse_request_head

if TYPE_CHECKING:
    from broker.server.native.dispatch import Dispatcher
    from broker.server.request_budget import RequestBudget
    from broker.server.security.authentication import Authenticator

log = logging.getLogger("logferry.connection")

MAX_IN_FLIGHT_REQUESTS = 1024
"""A connection stops reading while this many of its requests (fetch long polls,
admin calls) run: each holds a task and its frame, and a client that pipelines
requests must not grow them without end. Well-behaved clients keep a few in flight."""


class ConnectionLimits(Protocol):
    """The broker settings a connection applies."""

    @property
    def max_request_bytes(self) -> int: ...
    @property
    def max_unsent_bytes_per_connection(self) -> int: ...
    @property
    def max_connections(self) -> int: ...


class ConnectionCounters(Protocol):
    """The broker metrics a connection counts in (labels -> count)."""

    @property
    def connections_refused(self) -> MutableMapping[Any, float]: ...
    @property
    def connections_timed_out(self) -> MutableMapping[Any, float]: ...
    @property
    def read_holds(self) -> MutableMapping[Any, float]: ...


class ConnectionHost(Protocol):
    """What a native connection needs of the broker it serves, and nothing more (the
    broker is one; a test gives a stand-in)."""

    @property
    def config(self) -> ConnectionLimits: ...
    @property
    def request_budget(self) -> RequestBudget: ...
    @property
    def connections(self) -> set[BrokerConnection]: ...
    @property
    def stats(self) -> ConnectionCounters: ...
    @property
    def dispatcher(self) -> Dispatcher: ...

    def count_request(self, api: str, seconds: float, error: bool = False) -> None: ...


class BrokerConnection(asyncio.Protocol):
    """The broker's end of one TCP connection."""

    data_received_copies = True
    """``data_received`` copies the bytes into the decoder at once: under TLS it may be
    given a view of a reused buffer (broker/net/tls_accept.py)."""

    def __init__(
        self, broker: ConnectionHost, authenticator: Authenticator | None = None, listener_name: str = DEFAULT_LISTENER
    ):
        """``authenticator``, ``listener_name``: the SASL side and the name of the
        listener it arrived on."""
        self.broker = broker
        self.authenticator = authenticator
        self.listener_name = listener_name
        """Metadata answers give the brokers' addresses on this listener."""
        self.decoder = protocol.FrameDecoder(broker.config.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.principal: Principal = ANONYMOUS
        """Who is on the other end; authentication replaces it."""
        self.auth: ConnectionAuth | None = None
        self._queue: deque[bytes | FileReply] = deque()
        self._queued_bytes = 0
        """Bytes of the answers in ``_queue`` (file bytes included): unsent answers."""
        self._sending = False
        self._closed = False
        self.tasks: set[asyncio.Task[Any]] = set()
        self._budget = broker.request_budget
        self._max_unsent = broker.config.max_unsent_bytes_per_connection
        self._reserved = 0
        """Budget bytes reserved for the frame being received."""
        self._waiting_budget = False
        self._write_paused = False
        """The transport's buffer is over ``max_unsent_bytes_per_connection``."""
        self._writable = asyncio.Event()
        """Set while writing is not paused (and once the connection is lost, so that a
        waiting send wakes up and sees the closed transport)."""
        self._writable.set()
        self._backlogged = False
        """Unsent answers or requests in flight are over their limits (kept up to date
        by :meth:`_update_backlog` so the per-frame check is one attribute)."""
        self.held = False
        """Reading is stopped by the broker (budget, unsent answers, requests in flight)."""
        self._resume_scheduled = False
        self._in_sendfile = False
        self.stalled_since: float | None = time.monotonic()
        """When the request this connection owes began (its first, or one partly
        received), by ``time.monotonic()``; None while it owes nothing."""
        self._first_data = True

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = tr = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        connections = self.broker.connections
        if len(connections) >= self.broker.config.max_connections:
            self._closed = True
            self.broker.stats.connections_refused[()] += 1
            _refusals.warning(
                "refusing connections: %d are open (max_connections); latest from %s", len(connections), self.peer
            )
            tr.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tr.set_write_buffer_limits(high=self._max_unsent)
        self.auth = ConnectionAuth(self.authenticator, self, transport.get_extra_info("peercert"))
        connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._writable.set()
        self.broker.connections.discard(self)
        if self._waiting_budget:
            self._waiting_budget = False
            self._budget.cancel(self._granted)
        reserved, self._reserved = self._reserved, 0
        self._budget.release(reserved)
        for task in list(self.tasks):
            task.cancel()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._writable.clear()
        self._backlogged = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._writable.set()
        self._update_backlog()

    async def _wait_writable(self) -> None:
        """Return once the transport takes more bytes (see ``tls_send``)."""
        await self._writable.wait()

    # -- backpressure -----------------------------------------------------------------

    def data_received(self, data: bytes | memoryview) -> None:
        """Take the whole frames out of the decoder and dispatch them; stop (and stop
        reading) when the broker must wait. (:meth:`_resume` calls it with no bytes.)

        A frame that arrived whole is handled at once: its bytes are already in memory
        (at most one read's worth). A frame that needs more reads reserves its whole
        size from the budget first, so buffering it never takes the broker over the
        budget; when the budget is short the connection waits without reading. The
        common case (whole frames) costs one attribute check per frame.
        """
        if self._first_data and data:
            self._first_data = False
            if self.peer_speaks_tls(data):
                return
        decoder = self.decoder
        decoder.feed(data)
        completed = False
        while not self._closed:
            if self._backlogged and not self._reserved:  # between frames only
                self._hold("unsent")
                break
            try:
                frame = decoder.next_frame()
            except (FrameTooLargeError, ProtocolError) as exc:
                self._fatal(exc)
                return
            if frame is None:
                if decoder.buffered:
                    if completed or self.stalled_since is None:
                        self.stalled_since = time.monotonic()
                    if not self._reserved:
                        self._reserve_pending()
                elif completed:
                    self.stalled_since = None
                return
            reserved = self._reserved
            if reserved:
                self._reserved = 0
            completed = True
            self._dispatch(frame, reserved)

    def peer_speaks_tls(self, data: bytes | memoryview) -> bool:
        """A TLS client on this plaintext port: close at once, saying so only at DEBUG
        (the client's handshake fails with its own clear error)."""
        if (
            self.transport is None
            or self.transport.get_extra_info("sslcontext") is not None
            or not socket_errors.looks_like_tls(data)
        ):
            return False
        log.debug("closing connection from %s: it speaks TLS on a plaintext port", self.peer)
        self.close()
        return True

    def _reserve_pending(self) -> None:
        """Reserve the partly received frame's size, or wait for it without reading."""
        size = self.decoder.pending_frame_size()
        if size is None or self._waiting_budget:
            return
        if self._budget.try_reserve(size):
            self._reserved = size
            return
        self._waiting_budget = True
        self._budget.wait(size, self._granted)
        if self._waiting_budget:
            self._hold("budget")

    def _update_backlog(self) -> None:
        """Recompute :attr:`_backlogged` after answers were queued or sent or a request
        started or ended; resume reading if it cleared."""
        self._backlogged = (
            self._write_paused or self._queued_bytes > self._max_unsent or len(self.tasks) >= MAX_IN_FLIGHT_REQUESTS
        )
        if self.held:
            self._maybe_resume()

    def _granted(self, nbytes: int) -> None:
        """The budget reserved this connection's frame (called inside a release)."""
        self._waiting_budget = False
        if self._closed:
            self._budget.release(nbytes)
            return
        self._reserved = nbytes
        self._maybe_resume()

    def _hold(self, reason: str) -> None:
        """Stop reading until :meth:`_maybe_resume` finds the reason gone."""
        if not self.held:
            self.held = True
            self.broker.stats.read_holds[(("reason", reason),)] += 1
        if not self._in_sendfile and self.transport is not None and self.transport.is_reading():
            self.transport.pause_reading()

    def _maybe_resume(self) -> None:
        if (
            self.held
            and not self._resume_scheduled
            and not self._closed
            and not self._waiting_budget
            and not self._backlogged
        ):
            self._resume_scheduled = True
            asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if self._closed or not self.held or self._waiting_budget or self._backlogged:
            return
        self.held = False
        if self.stalled_since is not None:
            self.stalled_since = time.monotonic()  # the wait was the broker's, not the client's
        self.data_received(b"")
        self._apply_reading()

    def _apply_reading(self) -> None:
        transport = self.transport
        if self._closed or self._in_sendfile or transport is None:
            return
        if self.held:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    def close_stalled(self) -> None:
        """Drop a client that owes a request for too long (never spoke, or stopped
        mid-frame): abort, since a client that does not send may not read either."""
        if self._closed or self.transport is None:
            return
        log.info("closing connection from %s: no complete request within incomplete_request_timeout_ms", self.peer)
        self.broker.stats.connections_timed_out[()] += 1
        self._closed = True
        self.transport.abort()

    # -- requests ---------------------------------------------------------------------

    def _dispatch(self, frame: protocol.Frame, reserved: int) -> None:
        """Hand a frame to its handler; its ``reserved`` budget bytes are released
        when the handler is done with it."""
        try:
            head = parse_request_head(frame.header)
        except UnsupportedApiError as exc:
            self._budget.release(reserved)  # release(0) does nothing
            self.broker.count_request("unknown", 0.0, error=True)
            self.send(protocol.encode_error(getattr(exc, "correlation_id", None), exc.code, str(exc)))
            return
        except InvalidRequestError as exc:
            self._budget.release(reserved)
            self._fatal(exc, getattr(exc, "correlation_id", None))
            return
        dispatcher = self.broker.dispatcher
        responder = Responder(self, head.correlation_id, head.name, self.broker.count_request)
        if self.auth is not None and not self.auth.admit(head, frame, responder):
            self._budget.release(reserved)  # answered (SASL) or refused (not authenticated)
            return
        if dispatcher.is_synchronous(head):
            try:
                dispatcher.handle_produce(head, frame, responder)
            finally:
                if reserved:
                    self._budget.release(reserved)
        else:
            if not reserved:  # arrived whole; it lives as long as its task
                reserved = len(frame.payload.obj)  # type: ignore[arg-type]
                self._budget.take(reserved)
            task = asyncio.get_running_loop().create_task(dispatcher.handle(head, frame, responder))
            self.tasks.add(task)
            task.add_done_callback(functools.partial(self._request_done, reserved))
            if len(self.tasks) >= MAX_IN_FLIGHT_REQUESTS:
                self._backlogged = True

    def _request_done(self, reserved: int, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        self._budget.release(reserved)
        if self._backlogged:
            self._update_backlog()

    def _fatal(self, exc: LogferryError, corr: int | None = None) -> None:
        """Answer a frame that cannot be processed, then close: the stream is lost. At
        most one line per kind of error every few seconds: a client that reconnects and
        sends the same oversized frame again must not write a line per attempt."""
        _closes.warning("closing connection from %s: %s", self.peer, exc, key=type(exc).__name__)
        self.broker.count_request("invalid", 0.0, error=True)
        self.send(protocol.encode_error(corr, exc.code, str(exc)))
        self.close()

    # -- responses --------------------------------------------------------------------

    def send(self, item: bytes | FileReply) -> None:
        """Queue a response; written at once unless a file reply is being sent. A small
        file reply (:data:`SMALL_FILE_REPLY`) is read and written at once too."""
        if self._closed or self.transport is None:
            return
        if not self._sending and not self._queue:
            if isinstance(item, bytes):
                self.transport.write(item)
                return
            if _file_bytes(item) <= SMALL_FILE_REPLY:
                self._write_small(item)
                return
        self._queue.append(item)
        self._queued_bytes += _size(item)
        if self._queued_bytes > self._max_unsent:
            self._backlogged = True
        if not self._sending:
            self._sending = True
            task = asyncio.get_running_loop().create_task(self._drain())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue and not self._closed:
                item = self._queue.popleft()
                if isinstance(item, bytes):
                    self.transport.write(item)  # type: ignore[union-attr]
                    self._sent_from_queue(len(item))
                    continue
                if _file_bytes(item) <= SMALL_FILE_REPLY:
                    self._write_small(item)
                    self._sent_from_queue(_size(item))
                    continue
                tls = self.transport.get_extra_info("sslcontext") is not None  # type: ignore[union-attr]
                head = item.head if tls else b""  # under TLS it leaves with the first bytes
                if not tls:
                    self.transport.write(item.head)  # type: ignore[union-attr]
                    self._sent_from_queue(len(item.head))
                for piece in item.slices:
                    if piece.count and tls:  # no sendfile under TLS: see tls_send
                        # the type: ignore on its argument's own line, where `ruff format` keeps it
                        await send_file_range(
                            self.transport,  # type: ignore[arg-type]
                            piece.file,
                            piece.position,
                            piece.count,
                            self._wait_writable,
                            head,
                        )
                        self._sent_from_queue(len(head) + piece.count)
                        head = b""
                    elif piece.count:
                        # asyncio pauses reading during a sendfile and resumes it after;
                        # a hold taken or lifted meanwhile is applied once it returns
                        self._in_sendfile = True
                        assert self.transport is not None  # not closed: checked above
                        try:
                            await loop.sendfile(self.transport, piece.file, piece.position, piece.count, fallback=True)
                        finally:
                            self._in_sendfile = False
                            self._apply_reading()
                        self._sent_from_queue(piece.count)
                if head:  # no file bytes to send
                    self.transport.write(head)  # type: ignore[union-attr]
                    self._sent_from_queue(len(head))
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.info("connection to %s failed while sending: %s", self.peer, exc)
            self.close()
        finally:
            self._sending = False

    def _write_small(self, item: FileReply) -> None:
        """Write a small file reply with one ``pread`` per slice and one write: cheaper
        than a sendfile, which pauses reading, watches the socket for writing and
        resumes (a task and some eight syscalls per answer: the cost of every long-poll
        answer a following consumer gets)."""
        parts = [item.head]
        try:
            for piece in item.slices:
                if piece.count:
                    data = os.pread(piece.file.fileno(), piece.count, piece.position)
                    if len(data) != piece.count:  # truncated meanwhile: the frame is lost
                        raise OSError(f"read {len(data)} of {piece.count} bytes")
                    parts.append(data)
        except (OSError, ValueError) as exc:  # ValueError: the segment was closed
            log.info("connection to %s closed: cannot read its answer from the log: %s", self.peer, exc)
            self.close()
            return
        self.transport.write(b"".join(parts))  # type: ignore[union-attr]

    def _sent_from_queue(self, nbytes: int) -> None:
        self._queued_bytes -= nbytes
        if self._backlogged:
            self._update_backlog()

    def close(self) -> None:
        """Close after what was queued so far is written."""
        if not self._closed and self.transport is not None:
            self._closed = True
            if self._sending:
                self.transport.abort()
            else:
                self.transport.close()


def _size(item: bytes | FileReply) -> int:
    if isinstance(item, bytes):
        return len(item)
    return len(item.head) + _file_bytes(item)


def _file_bytes(item: FileReply) -> int:
    return sum(piece.count for piece in item.slices)


SMALL_FILE_REPLY = 64 * 1024
"""File replies up to this many log bytes are read into memory and written, not sent
with sendfile: below it, a sendfile's setup costs more than the copy it saves."""


_refusals = RateLimitedLog(log, 10.0, "more refused since the last line")
_closes = RateLimitedLog(log, 10.0, "more connections closed so since the last line")
"""A flood of refused connections must not flood the log."""


def close_stalled(connections: Iterable[BrokerConnection], now: float, timeout_s: float) -> int:
    """Close the connections that have owed a request for over ``timeout_s`` (a
    client that opened and never spoke, or stopped in the middle of a frame); those
    the broker itself stopped reading from are not the client's fault and are kept.
    Returns how many were closed."""
    closed = 0
    for conn in list(connections):
        since = conn.stalled_since
        if (since is not None and not conn.held and now - since > timeout_s) or (
            conn.auth is not None and conn.auth.overdue(now, timeout_s)
        ):
            conn.close_stalled()
            closed += 1
    return closed


ACCEPT_BURST = 1024
"""Connections asyncio may accept at once (the listen backlog) before the ones over
``max_connections`` are closed: descriptors can briefly reach max_connections plus this."""


def fd_limit_warning(max_connections: int, open_files_limit: int) -> str | None:
    """A sentence when ``max_connections`` cannot be reached within the process's
    open-file limit (``ulimit -n``), so accepts would fail before the cap applies."""
    needed = max_connections + ACCEPT_BURST + 100  # the broker's own files and sockets
    if open_files_limit < 0 or open_files_limit >= needed:
        return None
    return (
        f"max_connections ({max_connections}) plus an accept burst ({ACCEPT_BURST}) "
        f"and the broker's own files need about {needed} descriptors, more than the "
        f"open-file limit ({open_files_limit}, ulimit -n): raise the limit "
        "(LimitNOFILE= in systemd) or lower max_connections"
    )
