"""SASL SCRAM on the Kafka listener: SaslHandshake (api 17) v1, SaslAuthenticate (api 36)
v0-v2, as librdkafka, kafka-python and aiokafka negotiate them (KIP-43, KIP-152).
ApiVersions lists SaslHandshake 0-1, as Kafka 3 does (older librdkafka, Debian's kcat's,
looks for v0 before it uses SASL at all), but a v0 handshake, after which tokens would
travel without Kafka framing, is answered UNSUPPORTED_VERSION and the connection closed.

The exchange is Kafka's: ApiVersions (optional), SaslHandshake naming the mechanism,
then SaslAuthenticate carrying the client-first message and SaslAuthenticate carrying
the client-final one. The SCRAM itself is the one both front ends use
(:class:`~broker.server.security.scram.ScramSession`): the same users
(``logferry user create``, ``/config/users``), the same credential cache, the same
failure counter and rate-limited log line. The principal it yields (``User:<name>``)
is what the authorizer sees for every later request of the connection, so a Kafka
client's denied request gets Kafka's own ``*_AUTHORIZATION_FAILED`` code.

On a listener whose ``auth.required`` is true, any request other than ApiVersions and
the SASL apis before the exchange succeeds closes the connection (Kafka's broker does
the same), and so does a connection still unauthenticated after
``incomplete_request_timeout_ms``. A wrong password and an unknown user fail alike
(SASL_AUTHENTICATION_FAILED, 58, "unknown user or wrong password"), after which the
connection closes: a failed exchange cannot be resumed. A verified TLS client
certificate makes the connection authenticated as its subject, as on native listeners.

No re-authentication (KIP-368): SaslAuthenticate answers a session lifetime of 0, so
clients never start a second exchange; one is refused with ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.common.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    LogferryError,
    UnsupportedSaslMechanismError,
)
from broker.common.principal import Principal
from broker.common.ratelimit import RateLimitedLog
from broker.server.kafka.protocol import Api, Request, encode_response, make, response_schema
from broker.server.security.authentication import Authenticator
from broker.server.security.scram import SaslState, ScramSession

log = logging.getLogger("logferry.kafka")

SASL_APIS = frozenset({Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE})
PRE_AUTH_APIS = SASL_APIS | {Api.API_VERSIONS}
"""What a client may send on a listener that requires authentication before it has."""


class SaslChannel(Protocol):
    """What SASL needs of a Kafka connection: who it is and how to end it."""

    peer: str
    principal: Principal

    def close(self) -> None: ...


_refusals = RateLimitedLog(log, 10.0)
"""A flood of refusals must not flood the log."""


class KafkaSasl:
    """One Kafka connection's authentication: its SCRAM session in Kafka's framing."""

    __slots__ = ("session", "channel", "_timer")

    def __init__(
        self,
        authenticator: Authenticator | None,
        channel: SaslChannel,
        peercert: Mapping[str, Any] | None = None,
        timeout_s: float = 0.0,
    ):
        self.channel = channel
        self.session = ScramSession(authenticator, channel.peer, peercert)
        self._timer: asyncio.TimerHandle | None = None
        if self.session.authenticated:
            channel.principal = self.session.principal
        elif self.session.required and timeout_s > 0:
            self._timer = asyncio.get_running_loop().call_later(timeout_s, self._expire)

    @property
    def authenticated(self) -> bool:
        return self.session.authenticated

    @property
    def required(self) -> bool:
        """True when only authenticated connections may use the listener."""
        return self.session.required

    def admits(self, api_key: int) -> bool:
        """True when a request of ``api_key`` may be served now; False when the
        connection must be closed instead (authentication required and not done)."""
        session = self.session
        if api_key in SASL_APIS:
            return True
        if session.authenticated or not session.required:
            return not session.in_exchange
        if api_key == Api.API_VERSIONS and session.state == SaslState.START:
            return True
        _refusals.warning(
            "closing Kafka connection from %s: api %d before SASL authentication, which this listener requires",
            self.channel.peer,
            api_key,
        )
        return False

    def stop(self) -> None:
        """The connection is gone: forget the pending timeout."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if not self.session.authenticated:
            _refusals.warning(
                "closing Kafka connection from %s: not authenticated within the "
                "timeout (incomplete_request_timeout_ms)",
                self.channel.peer,
            )
            self.channel.close()

    # -- the two apis ---------------------------------------------------------------------

    async def handle(self, request: Request) -> tuple[bytes, bool]:
        """The response frame to a SASL request, and whether to close the connection
        once it is written (after any failure: Kafka's broker does the same)."""
        if request.api_key == Api.SASL_HANDSHAKE:
            body, close = self._handshake(request.version, request.body.mechanism)
        else:
            body, close = await self._authenticate(request.version, request.body.auth_bytes)
        return encode_response(request.api_key, request.version, request.correlation_id, body), close

    def _handshake(self, version: int, mechanism: str) -> tuple[Any, bool]:
        session = self.session
        offered = session.offered
        schema = response_schema(Api.SASL_HANDSHAKE, version)
        if version == 0:  # unframed tokens would follow: clients since Kafka 1.0 use v1
            session.state = SaslState.FAILED
            log.info(
                "Kafka client %s: SaslHandshake v0 (unframed SASL tokens) is not "
                "served; the client needs SaslAuthenticate (Kafka 1.0's protocol)",
                self.channel.peer,
            )
            return make(schema, error_code=ErrorCode.unsupported_version, mechanisms=offered), True
        try:
            session.handshake(mechanism)
        except IllegalSaslStateError:
            return make(schema, error_code=ErrorCode.illegal_sasl_state, mechanisms=offered), True
        except UnsupportedSaslMechanismError:  # also: a listener that offers no SASL at all
            log.info(
                "Kafka client %s asked for SASL mechanism %r; this listener offers %s",
                self.channel.peer,
                mechanism[:64],
                ", ".join(offered) or "none",
            )
            return make(schema, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=offered), True
        return make(schema, error_code=ErrorCode.none, mechanisms=offered), False

    async def _authenticate(self, version: int, token: bytes) -> tuple[Any, bool]:
        schema = response_schema(Api.SASL_AUTHENTICATE, version)
        session = self.session

        def answer(code: ErrorCode, message: str | None, data: bytes = b"") -> Any:
            return make(schema, error_code=code, error_message=message, auth_bytes=data, session_lifetime=timedelta(0))

        try:
            if session.state == SaslState.HANDSHAKEN:
                # the credentials are read from ZooKeeper meanwhile
                return answer(ErrorCode.none, None, await session.first(token)), False
            data = session.final(token)
        except IllegalSaslStateError as exc:
            return answer(ErrorCode.illegal_sasl_state, str(exc)), True
        except AuthenticationError as exc:
            return answer(ErrorCode.sasl_authentication_failed, str(exc)), True
        except LogferryError as exc:  # ZooKeeper unreachable: not the client's fault
            log.warning("Kafka client %s: cannot check credentials: %s", self.channel.peer, exc)
            return answer(
                ErrorCode.unknown_server_error, f"the broker cannot check credentials now ({exc}); retry"
            ), True
        self.stop()
        self.channel.principal = session.principal
        return answer(ErrorCode.none, None, data), False


__all__ = ["KafkaSasl", "PRE_AUTH_APIS", "SASL_APIS", "SaslChannel"]
