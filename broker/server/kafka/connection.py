"""One Kafka client's connection: Kafka frames in, Kafka responses out, in order.

The sans-IO :mod:`broker.server.kafka.protocol` cuts and parses frames; each request runs as
a task on :class:`~broker.server.kafka.service.KafkaService`, except produce, which
starts synchronously so one connection's appends keep their order. Kafka clients
expect responses in request order, so each request holds a slot in a queue and a
response is written once every earlier one is.

Bad input never takes the broker down: a frame over ``max_request_bytes`` (Kafka's
``socket.request.max.bytes``; or below the smallest header) or a body that does not
match its schema closes the connection, with a warning rate-limited per kind (a record
batch over ``max_message_bytes`` is not bad input: its partition gets
MESSAGE_TOO_LARGE and the connection stays open);
an api or version not served gets Kafka's UNSUPPORTED_VERSION answer (closing only
when no Kafka release defines that api version). Reading stops while too many
requests are in flight or the client does not read its answers. SASL requests, and
the refusal of others before authentication, are :mod:`broker.server.kafka.sasl`'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from typing import TYPE_CHECKING, Any

from broker.common.errors import FrameTooLargeError, InvalidRequestError, LogferryError
from broker.common.principal import ANONYMOUS, Principal
from broker.common.ratelimit import RateLimitedLog
from broker.server.kafka import protocol
from broker.server.kafka.chunks import Buffer
from broker.server.kafka.sasl import SASL_APIS, KafkaSasl
from broker.server.kafka.service import _Channel

if TYPE_CHECKING:
    from broker.server.kafka.service import KafkaService
    from broker.server.security.authentication import Authenticator

log = logging.getLogger("logferry.kafka")

MAX_IN_FLIGHT = 256
"""Requests of one connection running at once before it stops reading."""
SASL_CLOSE_DELAY_S = 0.1
"""How long after a failed SASL answer the connection closes (Kafka's
``connection.failed.authentication.delay.ms`` is 100 ms too)."""


_closes = RateLimitedLog(log, 10.0, "more connections closed so since the last line")
"""One line per kind of bad input every 10 s (the muted ones are counted in the next)."""

IOV_MAX = 1024
"""Buffers per ``writev`` (Linux's limit)."""


class _Slot:
    __slots__ = ("data", "done")

    def __init__(self) -> None:
        self.data: bytes | list[Buffer] | None = None
        self.done = False


class KafkaConnection(asyncio.Protocol):
    """The broker's end of one Kafka client's TCP connection."""

    def __init__(
        self,
        service: KafkaService,
        max_request_bytes: int,
        connections: set[KafkaConnection],
        authenticator: Authenticator | None = None,
        auth_timeout_s: float = 0.0,
    ):
        self.service = service
        self.decoder = protocol.FrameDecoder(max_request_bytes)
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.principal: Principal = ANONYMOUS
        self._slots: deque[_Slot] = deque()
        self.tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._write_paused = False
        self._reading = True
        self._channel = _Channel(self.peer, self.principal, self.close)
        self._authenticator = authenticator
        self._auth_timeout_s = auth_timeout_s
        self.sasl: KafkaSasl | None = None
        self._fd = -1
        """The socket's descriptor on a plaintext connection (gathering writes)."""

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._channel = _Channel(self.peer, self.principal, self.close)
        self.sasl = KafkaSasl(
            self._authenticator, self._channel, transport.get_extra_info("peercert"), self._auth_timeout_s
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if transport.get_extra_info("sslcontext") is None:
                self._fd = sock.fileno()
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.connections.discard(self)
        if self.sasl is not None:
            self.sasl.stop()
        for task in list(self.tasks):
            task.cancel()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        self._drain_frames()

    # -- requests ---------------------------------------------------------------------

    def _drain_frames(self) -> None:
        while not self._closed and self._reading_allowed():
            try:
                frame = self.decoder.next_frame()
            except FrameTooLargeError as exc:
                self._fatal(str(exc), "frame size")
                return
            if frame is None:
                break
            self._dispatch(frame)
        self._update_reading()

    def _reading_allowed(self) -> bool:
        return not self._write_paused and len(self._slots) < MAX_IN_FLIGHT

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closed:
            return
        want = self._reading_allowed()
        if want and not self._reading:
            self._reading = True
            transport.resume_reading()
            asyncio.get_running_loop().call_soon(self._drain_frames)
        elif not want and self._reading:
            self._reading = False
            transport.pause_reading()

    def _dispatch(self, frame: bytes) -> None:
        try:
            parsed = protocol.parse_request(frame)
        except InvalidRequestError as exc:
            self._fatal(str(exc), "malformed request")
            return
        if self.sasl is not None and not self.sasl.admits(parsed.api_key):
            self.close()  # before authentication (kafka/sasl.py logs it, rate-limited)
            return
        slot = _Slot()
        self._slots.append(slot)
        if isinstance(parsed, protocol.Unsupported):
            answer = protocol.unsupported_response(*parsed)
            if answer is None:
                why = f"api {parsed.api_key} v{parsed.version} is not a Kafka api version this broker knows"
                self._fatal(why, "unknown api")
                return
            log.debug("%s: unsupported api %d v%d", self.peer, parsed.api_key, parsed.version)
            self._complete(slot, answer)
            return
        run = self._sasl if parsed.api_key in SASL_APIS else self._run
        task = asyncio.get_running_loop().create_task(run(parsed, slot))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, request: protocol.Request, slot: _Slot) -> None:
        try:
            answer = await self.service.handle(request, self._channel)
        except asyncio.CancelledError:
            raise
        except LogferryError as exc:
            log.info("%s: Kafka api %d failed: %s", self.peer, request.api_key, exc)
            self.close()
            return
        except Exception:
            log.exception("Kafka api %d v%d from %s failed", request.api_key, request.version, self.peer)
            self.close()
            return
        self._complete(slot, answer)

    async def _sasl(self, request: protocol.Request, slot: _Slot) -> None:
        assert self.sasl is not None
        try:
            answer, close = await self.sasl.handle(request)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Kafka SASL api %d v%d from %s failed", request.api_key, request.version, self.peer)
            self.close()
            return
        self.principal = self._channel.principal
        self._complete(slot, answer)
        if close:  # shortly after: clients then read the answer before they see the close
            asyncio.get_running_loop().call_later(SASL_CLOSE_DELAY_S, self.close)

    def _complete(self, slot: _Slot, data: bytes | list[Buffer] | None) -> None:
        """Record a response and write every response now due, in request order."""
        slot.data = data
        slot.done = True
        slots = self._slots
        transport = self.transport
        while slots and slots[0].done:
            head = slots.popleft()
            if head.data and transport is not None and not self._closed:
                if isinstance(head.data, bytes):
                    transport.write(head.data)
                else:
                    self._write_parts(transport, head.data)
        self._update_reading()

    def _write_parts(self, transport: asyncio.Transport, parts: list[Buffer]) -> None:
        """Write a response given as buffers (a fetch's: views of the log bytes read).
        On a plaintext socket with nothing buffered, one ``writev`` sends what the
        socket takes without joining them first; the rest goes to the transport's buffer
        (copied there, as any unsent bytes are). TLS copies in its own layer anyway."""
        start = 0
        if self._fd >= 0 and not transport.is_closing() and transport.get_write_buffer_size() == 0:
            start = _writev(self._fd, parts)
        for part in parts[start:]:
            transport.write(part)

    def _fatal(self, why: str, kind: str) -> None:
        """Close the connection for bad input, saying why in at most one line per
        ``kind`` every few seconds: a client that reconnects and sends the same
        frame again (an oversized one, say) must not write a line per attempt."""
        _closes.warning("closing Kafka connection from %s: %s", self.peer, why, key=kind)
        self.close()

    def close(self) -> None:
        """Close after what was written so far."""
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()


def _writev(fd: int, parts: list[Buffer]) -> int:
    """Send ``parts`` on the non-blocking socket ``fd`` with ``writev`` until it takes
    no more; returns the index of the first part not wholly sent, ``parts`` cut in
    place so that it begins with the unsent bytes (0 when nothing was sent)."""
    i = 0
    while i < len(parts):
        try:
            sent = os.writev(fd, parts[i : i + IOV_MAX])
        except (BlockingIOError, InterruptedError):
            break
        except OSError:  # the transport's own write then meets the error and closes
            break
        if sent <= 0:
            break
        while sent and i < len(parts):
            n = len(memoryview(parts[i]).cast("B"))
            if sent >= n:
                sent -= n
                i += 1
            else:
                parts[i] = memoryview(parts[i]).cast("B")[sent:]
                sent = 0
                break
        else:
            continue
        break  # a part was cut: the socket is full
    return i


__all__ = ["KafkaConnection", "MAX_IN_FLIGHT"]
