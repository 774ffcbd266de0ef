"""One client connection on the broker: frames in, responses out, in a safe order.

The connection feeds received bytes to the sans-IO :class:`FrameDecoder` and passes
each request to the broker's handlers. Produce requests are handled synchronously in
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
from typing import TYPE_CHECKING, NamedTuple

from broker.wire import protocol
from broker.common.errors import FrameTooLargeError, InvalidRequestError, LogferryError, ProtocolError

if TYPE_CHECKING:
    from broker.server.broker import Broker
    from broker.storage.partition_log import FileSlice

log = logging.getLogger("logferry.connection")


class FileReply(NamedTuple):
    """A response whose payload is sent from segment files with sendfile."""

    head: bytes
    slices: list["FileSlice"]


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
            api, corr = protocol.check_request(frame)
        except InvalidRequestError as exc:
            self._fatal(exc, getattr(exc, "correlation_id", None))
            return
        version = frame.header["v"]
        if api not in protocol.SUPPORTED_VERSIONS or version not in protocol.SUPPORTED_VERSIONS[api]:
            self.broker.count_request("unknown", 0.0, error=True)
            self.send(protocol.encode_error(
                corr, 2, f"unsupported api {api} version {version}; this broker serves "
                f"{ {protocol.API_NAMES[a]: sorted(v) for a, v in protocol.SUPPORTED_VERSIONS.items()} }"))
            return
        if api == protocol.PRODUCE:
            self.broker.handle_produce(self, corr, frame)
        else:
            task = asyncio.get_running_loop().create_task(self.broker.handle_async(self, api, corr, frame))
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
