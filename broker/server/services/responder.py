"""How a handler answers one request, without seeing the connection it came on.

A :class:`Responder` is made per request by the connection. It knows the request's
correlation id and api, writes the answer (or the error) through the connection's
ordered writer, and counts the request in the broker's metrics once, when it is
answered. It writes logferry's native answers: the native front end answers the
typed results of :mod:`broker.server.services.results` through it, and the apis not yet
typed (append_at, offsets, topic administration) still answer through it directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from broker.common.errors import LogferryError
from broker.common.principal import Principal
from broker.server.services.results import ProduceResult
from broker.wire import protocol
from broker.wire.produce import encode_produce_answer

log = logging.getLogger("logferry.broker")


class FileReply(NamedTuple):
    """A response whose payload is sent from segment files with sendfile."""

    head: bytes
    """The frame prefix and header."""
    slices: list[Any]
    """:class:`~broker.storage.partition_log.FileSlice` objects, sent in order."""


class ReplyChannel(Protocol):
    """What a responder needs from a connection."""

    peer: str
    principal: Principal

    def send(self, item: bytes | FileReply) -> None: ...

    def close(self) -> None: ...


CountRequest = Callable[[str, float, bool], None]
"""``count(api_name, seconds, error)``: records one answered request."""


class Responder:
    """Answers one request on the connection it arrived on."""

    __slots__ = ("_channel", "correlation_id", "api", "started", "_count")

    def __init__(
        self, channel: ReplyChannel, correlation_id: int, api: str, count: CountRequest, started: float | None = None
    ):
        self._channel = channel
        self.correlation_id = correlation_id
        self.api = api
        self.started = time.perf_counter() if started is None else started
        self._count = count

    @property
    def peer(self) -> str:
        """The client's address, for logs."""
        return self._channel.peer

    @property
    def principal(self) -> Principal:
        """Who sent the request (``ANONYMOUS`` until the connection authenticates)."""
        return self._channel.principal

    @property
    def listener(self) -> str:
        """The name of the listener the request arrived on ("default" for a channel
        that has none: the Kafka listener's, a test's)."""
        name: str = getattr(self._channel, "listener_name", "default")
        return name

    def answer(self, fields: dict[str, Any] | None = None, error: bool = False) -> None:
        """Send a successful answer (``error``: some of its parts failed)."""
        self.count(error)
        self._channel.send(protocol.encode_response(self.correlation_id, fields))

    def answer_with_files(self, fields: dict[str, Any], slices: Sequence[Any], nbytes: int) -> None:
        """Send an answer whose payload is ``nbytes`` of log bytes from ``slices``."""
        head = protocol.encode_response(self.correlation_id, fields, payload_len=nbytes)
        self.count(False)
        self._channel.send(FileReply(head, [s for s in slices if s is not None]) if nbytes else head)

    def answer_produce(self, result: ProduceResult) -> None:
        """Send a produce's result (a bound method is the produce service's reply: no
        closure per request)."""
        self.answer(encode_produce_answer(result.parts), error=result.failed)

    def acks0_produce(self, result: ProduceResult) -> None:
        """Take an acks=0 produce's result: count it, and close the connection if a part
        failed (the client sees no answer; closing is the only signal it gets)."""
        self.count(result.failed)
        if result.failed:
            log.warning("closing acks=0 producer %s after a failed produce: %s", self.peer, result.parts)
            self.close_connection()

    def fail(self, exc: LogferryError) -> None:
        """Answer that the request failed as a whole."""
        self.count(True)
        self._channel.send(protocol.encode_error(self.correlation_id, exc.code, str(exc)))

    def count(self, error: bool) -> None:
        """Record the request without answering (acks=0 produces get no answer)."""
        self._count(self.api, time.perf_counter() - self.started, error)

    def close_connection(self) -> None:
        """Close the connection after what is queued (the only signal acks=0 has)."""
        self._channel.close()


__all__ = ["CountRequest", "FileReply", "ReplyChannel", "Responder"]
