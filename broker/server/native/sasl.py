"""SASL on the native listener: SaslHandshake (api 10) and SaslAuthenticate (api 11) in
logferry's framing, around the shared :class:`~broker.server.security.scram.ScramSession`.

Each connection has a :class:`ConnectionAuth`: it answers the SASL apis itself (the
exchange is per-connection state, not a service's business), refuses any other request
before success when authentication is required (error 33, then the connection
closes), and sets ``connection.principal`` from the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from broker.common.errors import AuthenticationRequiredError, LogferryError
from broker.common.principal import Principal
from broker.server.security.authentication import Authenticator
from broker.server.security.scram import SaslState, ScramSession
from broker.server.services.responder import Responder
from broker.wire import protocol
from broker.wire.apis import RequestHead, parse_request
from broker.wire.sasl import (
    SaslAuthenticateAnswer,
    SaslAuthenticateRequest,
    SaslHandshakeAnswer,
    encode_authenticate_answer,
    encode_handshake_answer,
)

SASL_APIS = frozenset({protocol.SASL_HANDSHAKE, protocol.SASL_AUTHENTICATE})


class AuthChannel(Protocol):
    """What authentication needs from a connection."""

    peer: str
    principal: Principal
    tasks: set[asyncio.Task[Any]]

    def close(self) -> None: ...


class ConnectionAuth:
    """One native connection's authentication: its SCRAM session in logferry's framing."""

    __slots__ = ("session", "channel")

    def __init__(
        self, authenticator: Authenticator | None, channel: AuthChannel, peercert: Mapping[str, Any] | None = None
    ):
        self.channel = channel
        self.session = ScramSession(authenticator, channel.peer, peercert)
        if self.session.authenticated:
            channel.principal = self.session.principal

    @property
    def authenticated(self) -> bool:
        return self.session.authenticated

    @property
    def required(self) -> bool:
        return self.session.required

    @property
    def started(self) -> float:
        """When the connection began (``time.monotonic()``)."""
        return self.session.started

    def overdue(self, now: float, timeout_s: float) -> bool:
        """See :meth:`ScramSession.overdue` (the broker then closes the connection)."""
        return self.session.overdue(now, timeout_s)

    def admit(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> bool:
        """True when the request may go to its service; False when it was answered
        here (a SASL request, or one refused before authentication)."""
        if head.api in SASL_APIS:
            self._sasl(head, frame, responder)
            return False
        session = self.session
        if session.authenticated or not session.required:
            return True
        responder.fail(
            AuthenticationRequiredError(
                f"this broker requires authentication before {head.name} requests (SASL "
                "SCRAM, or a client certificate): give the client credentials"
            )
        )
        self.channel.close()
        return False

    def _sasl(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        session = self.session
        try:
            request = parse_request(head, frame)
            if head.api == protocol.SASL_HANDSHAKE:
                offered = session.handshake(request.mechanism)
                responder.answer(encode_handshake_answer(SaslHandshakeAnswer(list(offered))))
            elif session.state == SaslState.HANDSHAKEN:
                # the credentials are read from ZooKeeper meanwhile
                task = asyncio.get_running_loop().create_task(self._first(request, responder))
                self.channel.tasks.add(task)
                task.add_done_callback(self.channel.tasks.discard)
            else:
                self._done(responder, session.final(request.token))
        except LogferryError as exc:
            self._fail(responder, exc)

    async def _first(self, request: SaslAuthenticateRequest, responder: Responder) -> None:
        try:
            server_first = await self.session.first(request.token)
        except LogferryError as exc:
            self._fail(responder, exc)
            return
        responder.answer(encode_authenticate_answer(SaslAuthenticateAnswer(server_first)))

    def _done(self, responder: Responder, server_final: bytes) -> None:
        self.channel.principal = self.session.principal
        responder.answer(encode_authenticate_answer(SaslAuthenticateAnswer(server_final)))

    def _fail(self, responder: Responder, exc: LogferryError) -> None:
        """Answer the failure and close: a failed exchange cannot be resumed."""
        responder.fail(exc)
        self.channel.close()


__all__ = ["AuthChannel", "ConnectionAuth", "SASL_APIS"]
