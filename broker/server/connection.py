"""One client connection on the broker: frames in, responses out, in a safe order.

The connection feeds received bytes to the sans-IO :class:`FrameDecoder`, reads each
request's head, and hands the frame with a :class:`Responder` to the broker's
dispatcher; handlers never see the connection. Produce requests are handled synchronously in
``data_received`` so appends keep the order in which a client sent them; fetch and
admin requests run as tasks and may answer out of order (clients match responses by
correlation id). Responses go through one writer so a sendfile of log bytes is never
interleaved with another response.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING

from broker.common.errors import (
    FrameTooLargeError,
    InvalidRequestError,
    LogferryError,
    ProtocolError,
    UnsupportedApiError,
)
from broker.server.responder import FileReply, Responder
from broker.wire import protocol
from broker.wire.apis import parse_request_head

if TYPE_CHECKING:
    from broker.server.broker import Broker

log = logging.getLogger("logferry.connection")


class BrokerConnection(asyncio.Protocol):
    """The broker's end of one TCP connection."""

    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.decoder = protocol.FrameDecoder(broker.config.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._queue: deque[bytes | FileReply] = deque()
        self._sending = False
        self._closed = False
        self.tasks: set[asyncio.Task] = set()

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        for task in list(self.tasks):
            task.cancel()

    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        decoder.feed(data)
        while not self._closed:
            try:
                frame = decoder.next_frame()
            except (FrameTooLargeError, ProtocolError) as exc:
                self._fatal(exc)
                return
            if frame is None:
                return
            self._dispatch(frame)

    # -- requests ---------------------------------------------------------------------

    def _dispatch(self, frame: protocol.Frame) -> None:
        try:
            head = parse_request_head(frame.header)
        except UnsupportedApiError as exc:
            self.broker.count_request("unknown", 0.0, error=True)
            self.send(protocol.encode_error(getattr(exc, "correlation_id", None), exc.code,
                                            str(exc)))
            return
        except InvalidRequestError as exc:
            self._fatal(exc, getattr(exc, "correlation_id", None))
            return
        dispatcher = self.broker.dispatcher
        responder = Responder(self, head.correlation_id, head.name, self.broker.count_request)
        if dispatcher.is_synchronous(head):
            dispatcher.handle_produce(head, frame, responder)
        else:
            task = asyncio.get_running_loop().create_task(
                dispatcher.handle(head, frame, responder))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _fatal(self, exc: LogferryError, corr: int | None = None) -> None:
        """Answer a frame that cannot be processed, then close: the stream is lost."""
        log.warning("closing connection from %s: %s", self.peer, exc)
        self.broker.count_request("invalid", 0.0, error=True)
        self.send(protocol.encode_error(corr, exc.code, str(exc)))
        self.close()

    # -- responses --------------------------------------------------------------------

    def send(self, item: bytes | FileReply) -> None:
        """Queue a response; written at once unless a file reply is being sent."""
        if self._closed or self.transport is None:
            return
        if not self._sending and not self._queue and isinstance(item, bytes):
            self.transport.write(item)
            return
        self._queue.append(item)
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
                    continue
                self.transport.write(item.head)  # type: ignore[union-attr]
                for piece in item.slices:
                    if piece.count:
                        await loop.sendfile(self.transport, piece.file, piece.position,
                                            piece.count, fallback=True)
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.info("connection to %s failed while sending: %s", self.peer, exc)
            self.close()
        finally:
            self._sending = False

    def close(self) -> None:
        """Close after what was queued so far is written."""
        if not self._closed and self.transport is not None:
            self._closed = True
            if self._sending:
                self.transport.abort()
            else:
                self.transport.close()
