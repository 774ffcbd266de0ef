"""One connection's SASL SCRAM session, sans IO, for every front end.

The native listener (SaslHandshake api 10, SaslAuthenticate api 11, msgpack framing)
and the Kafka listener (SaslHandshake api 17, SaslAuthenticate api 36, Kafka framing)
run the same exchange: a handshake naming the mechanism, then the client-first and the
client-final messages (RFC 5802, 7677). A :class:`ScramSession` is that exchange's
state machine; a front end decodes its frames, calls :meth:`~ScramSession.handshake`,
:meth:`~ScramSession.first` and :meth:`~ScramSession.final`, and encodes what they
return or raise in its own protocol::

    START --handshake--> HANDSHAKEN --first--> BUSY (credentials being read)
          --> FINAL --final--> DONE (authenticated, ``principal`` set)
    any error --> FAILED (the front end answers it and closes the connection:
                          a failed exchange cannot be resumed)

Every failure the client can cause is one :class:`AuthenticationError` that says no
more than SCRAM allows: malformed messages, a wrong proof, and an unknown user, who
gets made-up credentials (:meth:`Authenticator.decoy`) and fails at the proof like a
wrong password. Such failures are counted and logged (rate-limited) here, once.
A verified TLS client certificate authenticates the session at once as its subject.
The only wait is :meth:`first`'s credential lookup (through the broker-wide
:class:`Authenticator`'s cache); nothing here reads or writes a socket.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from typing import Any

from broker.common.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    LogferryError,
    UnsupportedSaslMechanismError,
)
from broker.common.principal import ANONYMOUS, Principal
from broker.server.security.authentication import (
    Authenticator,
    announce,
    certificate_principal,
    scram_username,
)


class SaslState(enum.Enum):
    """Where a session's exchange stands (see the module's diagram)."""

    START = "start"
    HANDSHAKEN = "handshaken"
    BUSY = "busy"
    FINAL = "final"
    DONE = "done"
    FAILED = "failed"


class ScramSession:
    """One connection's authentication: a certificate's principal, or one SCRAM exchange."""

    __slots__ = (
        "authenticator",
        "peer",
        "principal",
        "authenticated",
        "started",
        "state",
        "mechanism",
        "user",
        "_server",
    )

    def __init__(
        self,
        authenticator: Authenticator | None,
        peer: str,
        peercert: Mapping[str, Any] | None = None,
        clock_now: float | None = None,
    ):
        self.authenticator = authenticator
        self.peer = peer
        self.principal: Principal = ANONYMOUS
        self.authenticated = False
        self.started = time.monotonic() if clock_now is None else clock_now
        self.state = SaslState.START
        self.mechanism = ""
        self.user = ""
        """The user name of the client-first message ("" before it is read)."""
        self._server: Any = None
        principal = certificate_principal(peercert)
        if principal is not None:  # the TLS handshake verified it against ca_file
            self.principal = principal
            self.authenticated = True
            announce(principal, peer, "client certificate")

    @property
    def required(self) -> bool:
        """True when only authenticated connections may use the listener."""
        return self.authenticator is not None and self.authenticator.config.required

    @property
    def offered(self) -> tuple[str, ...]:
        """The mechanisms this listener offers (none without an authenticator)."""
        return tuple(self.authenticator.config.mechanisms) if self.authenticator else ()

    @property
    def in_exchange(self) -> bool:
        """True between the handshake and the end of the exchange."""
        return self.state not in (SaslState.START, SaslState.DONE)

    def overdue(self, now: float, timeout_s: float) -> bool:
        """True when authentication is required and has not been done within
        ``timeout_s`` of connecting (an idle unauthenticated connection must not hold
        a slot for ever)."""
        return self.required and not self.authenticated and now - self.started > timeout_s

    def handshake(self, mechanism: str) -> tuple[str, ...]:
        """Accept ``mechanism``; returns the mechanisms offered. Raises
        IllegalSaslStateError (not the first step) or UnsupportedSaslMechanismError."""
        offered = self.offered
        if self.state != SaslState.START:
            raise self._failed(
                IllegalSaslStateError("a SASL handshake is allowed once per connection, before any exchange")
            )
        if not offered:
            raise self._failed(
                UnsupportedSaslMechanismError(
                    "this broker offers no SASL mechanism (no [auth] mechanisms in its config)"
                )
            )
        if mechanism not in offered:
            raise self._failed(
                UnsupportedSaslMechanismError(
                    f"SASL mechanism {mechanism[:64]!r} is not enabled; this broker offers {', '.join(offered)}"
                )
            )
        self.mechanism = mechanism
        self.state = SaslState.HANDSHAKEN
        return offered

    async def first(self, token: bytes) -> bytes:
        """The server-first message for the client-first ``token``. Raises
        AuthenticationError, IllegalSaslStateError (out of order), or another
        LogferryError when the credentials cannot be read (ZooKeeper unreachable: not
        the client's fault, not counted as a failed authentication)."""
        authenticator = self.authenticator
        if self.state != SaslState.HANDSHAKEN or authenticator is None:
            raise self._failed(_out_of_order())
        self.state = SaslState.BUSY
        try:
            client_first = token.decode("utf-8")
            self.user = scram_username(client_first)
        except (UnicodeDecodeError, AuthenticationError):
            raise self._failed(self._failure()) from None
        try:
            found = await authenticator.credentials(self.user)
        except LogferryError as exc:
            raise self._failed(exc) from None
        mechanism = self.mechanism
        credential = (found or {}).get(mechanism) or authenticator.decoy(mechanism, self.user)
        # scramp (and asn1crypto) costs ~35 ms of start: a broker imports it at its first SCRAM exchange
        from scramp import ScramException, ScramMechanism

        try:
            self._server = ScramMechanism(mechanism).make_server(
                lambda _name: (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
            )
            self._server.set_client_first(client_first)
            server_first = str(self._server.get_server_first()).encode("utf-8")
        except ScramException:
            raise self._failed(self._failure()) from None
        self.state = SaslState.FINAL
        return server_first

    def final(self, token: bytes) -> bytes:
        """The server-final message for the client-final ``token``, its proof checked;
        the session is then authenticated as ``User:<name>``. Raises
        AuthenticationError (wrong proof) or IllegalSaslStateError (out of order)."""
        server, self._server = self._server, None
        if self.state != SaslState.FINAL or server is None:
            raise self._failed(_out_of_order())
        from scramp import ScramException  # already imported by first(), which made the server

        try:
            client_final = token.decode("utf-8")
            _accept_repeated_client_nonce(server, client_final)
            server.set_client_final(client_final)
            server_final = str(server.get_server_final()).encode("utf-8")
        except (UnicodeDecodeError, ScramException):
            raise self._failed(self._failure()) from None
        self.state = SaslState.DONE
        self.authenticated = True
        self.principal = Principal("User", self.user)
        announce(self.principal, self.peer, self.mechanism)
        return server_final

    def _failure(self) -> AuthenticationError:
        """The one error of a failed exchange: it says no more than SCRAM does."""
        return AuthenticationError(
            f"authentication failed: unknown user or wrong password for {self.user[:128]!r} with {self.mechanism}"
        )

    def _failed(self, exc: LogferryError) -> LogferryError:
        """End the exchange; count (and log, rate-limited) a failed authentication."""
        self.state = SaslState.FAILED
        self._server = None
        if (
            self.authenticator is not None
            and isinstance(exc, AuthenticationError)
            and not isinstance(exc, (IllegalSaslStateError, UnsupportedSaslMechanismError))
            and self.mechanism
        ):
            self.authenticator.failed(self.peer, self.mechanism, self.user)
        return exc


def _out_of_order() -> IllegalSaslStateError:
    return IllegalSaslStateError(
        "SaslAuthenticate out of order: a handshake comes first, one exchange per connection, each answer awaited"
    )


def _accept_repeated_client_nonce(server: Any, client_final: str) -> None:
    """Let librdkafka before 2.6.1 in (Debian's kcat among its users): its client-final
    message repeats the client nonce, ``r=<client nonce><client nonce><server part>``.
    Kafka up to 3.9 accepted a nonce that *ends with* the exchange's nonce, so those
    clients work with Kafka 3, and they do here: the nonce still holds the server's
    random part (a replayed message fails), and the proof is checked over the message
    as the client sent it, so nothing else is relaxed."""
    nonce = str(server.nonce)
    for attribute in client_final.split(","):
        if attribute.startswith("r="):
            sent = attribute[2:]
            if sent != nonce and sent.endswith(nonce):
                server.nonce = type(server.nonce)(sent)
            return


__all__ = ["SaslState", "ScramSession"]
