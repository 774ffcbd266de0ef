"""The client's side of SASL SCRAM (RFC 5802, 7677), for every connection that
authenticates: the client library's blocking connections and a follower's asyncio
stream to its leader.

:func:`conversation` is the exchange itself, sans IO: a generator that yields each
request ``(api, fields)`` and is sent each answer's header, with the SCRAM messages made
and checked by the ``scramp`` package. :func:`authenticate_socket` and
:func:`authenticate_stream` drive it over a blocking socket or an asyncio stream. Every
failure is an :class:`~broker.common.errors.AuthenticationError` (never retried) or,
for a lost connection, a ``BrokerNotAvailableError``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Generator
from typing import Any

from broker.common.errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    LogferryError,
    ProtocolError,
    UnsupportedSaslMechanismError,
)
from broker.common.sasl import SaslCredentials
from broker.net import socket_errors
from broker.net.transport import BlockingStream
from broker.wire import protocol, sasl
from broker.wire.apis import parse_response_head, response_error

Request = tuple[int, dict[str, Any]]
Conversation = Generator[Request, dict[str, Any], None]


def conversation(credentials: SaslCredentials, address: str = "broker") -> Conversation:
    """Yield the requests of one SCRAM exchange; send back each answer's header (an
    error answer must be raised by the driver, see :func:`answer_error`)."""
    # scramp (and asn1crypto) costs ~35 ms of start: only a process that authenticates imports it
    from scramp import ScramClient, ScramException

    mechanism = credentials.mechanism
    answer = yield protocol.SASL_HANDSHAKE, sasl.encode_handshake_request(mechanism)
    offered = sasl.parse_handshake_answer(answer).mechanisms
    if mechanism not in offered:  # the broker answers error 31 first; a belt and braces check
        raise UnsupportedSaslMechanismError(
            f"{address} does not offer {mechanism} (it offers {', '.join(offered) or 'none'})"
        )
    try:
        client = ScramClient([mechanism], credentials.username, credentials.password)
        first = client.get_client_first()
    except ScramException as exc:
        raise AuthenticationError(
            f"cannot authenticate as {credentials.username!r}: {exc.args[0] if exc.args else exc}"
        ) from None
    answer = yield protocol.SASL_AUTHENTICATE, sasl.encode_authenticate_request(first.encode())
    try:
        client.set_server_first(_text(sasl.parse_authenticate_answer(answer).token))
        final = client.get_client_final()
    except ScramException as exc:
        raise AuthenticationError(
            f"{address} sent a SCRAM message logferry cannot use ({exc.args[0] if exc.args else exc})"
        ) from None
    answer = yield protocol.SASL_AUTHENTICATE, sasl.encode_authenticate_request(final.encode())
    try:
        client.set_server_final(_text(sasl.parse_authenticate_answer(answer).token))
    except ScramException:
        raise AuthenticationError(
            f"{address} could not prove that it knows user {credentials.username!r}'s "
            "credentials (its SCRAM signature is wrong): it may not be the broker it claims "
            "to be"
        ) from None


def _text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("a SCRAM message from the broker is not UTF-8") from None


def answer_error(header: Any, address: str, username: str) -> LogferryError | None:
    """The error an answer stands for (None on success), worded for authentication."""
    error = response_error(parse_response_head(header))
    if error is None:
        return None
    if isinstance(error, AuthenticationError):
        return type(error)(f"{address}: {error}")
    return error


def authenticate_socket(
    sock: BlockingStream,
    decoder: protocol.FrameDecoder,
    credentials: SaslCredentials,
    address: str,
    timeout: float | None,
    ids: itertools.count[int],
) -> None:
    """Run the exchange on a freshly connected blocking socket, each answer awaited
    before the next request; ``timeout`` bounds the whole exchange."""
    deadline = None if timeout is None else time.monotonic() + timeout
    buf = bytearray(65536)
    view = memoryview(buf)
    steps = conversation(credentials, address)
    request = next(steps)
    first = True
    try:
        while True:
            api, fields = request
            corr = next(ids)
            sock.sendall(protocol.encode_request(api, corr, fields))
            frame = decoder.next_frame()
            while frame is None:
                if deadline is not None:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                n = sock.recv_into(view)
                if first and socket_errors.looks_like_tls(view[:n]):
                    raise socket_errors.tls_expected_error(address)
                if n == 0:
                    raise BrokerNotAvailableError(f"{address} closed the connection during authentication")
                first = False
                decoder.feed(view[:n])
                frame = decoder.next_frame()
            error = answer_error(frame.header, address, credentials.username)
            if error is not None:
                raise error
            if frame.header.get("id") != corr:
                raise ProtocolError(
                    f"{address} answered request {frame.header.get('id')} during authentication, not {corr}"
                )
            try:
                request = steps.send(frame.header)
            except StopIteration:
                return
    except TimeoutError:
        raise BrokerNotAvailableError(f"{address} did not finish authentication within {timeout:.1f}s") from None
    except OSError as exc:
        raise socket_errors.lost_error(exc, address, during="failed") from None
    finally:
        sock.settimeout(None)


async def authenticate_stream(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    credentials: SaslCredentials,
    address: str,
    timeout: float = 10.0,
) -> None:
    """Run the exchange on a freshly opened asyncio stream (a follower to its leader)."""
    decoder = protocol.FrameDecoder()
    steps = conversation(credentials, address)
    request = next(steps)
    async with asyncio.timeout(timeout):
        for corr in itertools.count(1):
            api, fields = request
            writer.write(protocol.encode_request(api, corr, fields))
            await writer.drain()
            frame = decoder.next_frame()
            while frame is None:
                chunk = await reader.read(65536)
                if not chunk:
                    raise BrokerNotAvailableError(f"{address} closed the connection during authentication")
                decoder.feed(chunk)
                frame = decoder.next_frame()
            error = answer_error(frame.header, address, credentials.username)
            if error is not None:
                raise error
            try:
                request = steps.send(frame.header)
            except StopIteration:
                return


__all__ = ["answer_error", "authenticate_socket", "authenticate_stream", "conversation"]
