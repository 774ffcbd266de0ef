"""Who is on the other end of each connection: SASL SCRAM and mutual-TLS principals.

Configured by the broker's ``[auth]`` table (docs/security.md, "Authentication")::

    [auth]
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]  # SASL mechanisms offered
    required = true           # every request but SASL's needs an authenticated connection
    allow_plaintext = false   # SASL on a listener without TLS (passwords' proofs in clear)
    credential_cache_s = 10   # how long a user's credentials read from ZooKeeper are reused

Each connection has a :class:`ConnectionAuth`: it answers the SASL apis itself (the
exchange is per connection state, not a handler's business), refuses any other request
before success when authentication is required (error 33, then the connection closes),
and sets ``connection.principal`` on success: ``User:<name>`` after SCRAM, ``User:<subject>``
(``User:CN=agent-1,O=logferry``, RFC 4514 order) when a TLS client certificate was
verified. SCRAM after a certificate replaces the certificate's principal.

The broker-wide :class:`Authenticator` reads credentials from ZooKeeper
(:mod:`broker.coordination.credentials`) through a short cache, counts failures
(``logferry_broker_authentication_failures_total``) and logs them at a bounded rate.
A failure says no more than SCRAM allows: an unknown user gets a made-up salt (the
same for the same name) and fails at the proof like a wrong password, with the same
message.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from scramp import ScramException, ScramMechanism

from broker.common.config import BOOL, NONNEG_NUMBER, Check, Validator, fields
from broker.common.errors import (
    AuthenticationError,
    AuthenticationRequiredError,
    IllegalSaslStateError,
    LogferryError,
    UnsupportedSaslMechanismError,
)
from broker.common.principal import Principal
from broker.common.sasl import MECHANISMS
from broker.coordination.credentials import DEFAULT_ITERATIONS, ScramCredential
from broker.server.services.responder import Responder
from broker.wire import protocol
from broker.wire.apis import RequestHead, parse_request
from broker.wire.sasl import (
    SaslAuthenticateAnswer,
    SaslAuthenticateRequest,
    SaslHandshakeAnswer,
    SaslHandshakeRequest,
    encode_authenticate_answer,
    encode_handshake_answer,
)

log = logging.getLogger("logferry.auth")

SASL_APIS = frozenset({protocol.SASL_HANDSHAKE, protocol.SASL_AUTHENTICATE})

AUTH_FIELDS = fields(
    mechanisms=Check(lambda v: isinstance(v, list) and all(m in MECHANISMS for m in v),
                     f"a list of SASL mechanisms from {list(MECHANISMS)}"),
    required=BOOL,
    allow_plaintext=BOOL,
    credential_cache_s=NONNEG_NUMBER,
)
"""The broker's ``[auth]`` table."""


@dataclass(frozen=True)
class AuthConfig:
    """The broker's ``[auth]`` table."""

    mechanisms: tuple[str, ...] = MECHANISMS
    required: bool = False
    allow_plaintext: bool = False
    credential_cache_s: float = 10.0


def auth_from_table(validator: Validator, table: Mapping[str, Any], tls_on: bool,
                    client_auth: str) -> AuthConfig | None:
    """A checked ``[auth]`` table as an :class:`AuthConfig` (None when absent).

    Refuses settings that cannot work: authentication required with nothing to
    authenticate by, or SASL passwords' proofs over plaintext unless
    ``allow_plaintext`` says so."""
    if not table:
        return None
    config = AuthConfig(mechanisms=tuple(table.get("mechanisms", MECHANISMS)),
                        required=table.get("required", False),
                        allow_plaintext=table.get("allow_plaintext", False),
                        credential_cache_s=float(table.get("credential_cache_s", 10.0)))
    if config.mechanisms and not tls_on and not config.allow_plaintext:
        validator.fail("auth.mechanisms", "SASL needs TLS ([tls] enabled = true); set "
                       "auth.allow_plaintext = true to offer it on a plaintext port anyway "
                       "(anyone on the network then sees who logs in)")
    if config.required and not config.mechanisms and client_auth != "required":
        validator.fail("auth.required", "nothing to authenticate with: list auth.mechanisms "
                       "or set tls.client_auth = \"required\"")
    return config


def auth_warnings(config: AuthConfig | None, tls_on: bool, client_auth: str = "none",
                  has_credentials: bool = False) -> list[str]:
    """Valid but unwise settings, one sentence each (logged at start)."""
    warnings = []
    if config is not None and config.mechanisms and not tls_on:
        warnings.append("auth.allow_plaintext: SASL is offered on a plaintext port: user names "
                        "and SCRAM exchanges cross the network in clear (enable [tls])")
    if config is not None and config.required and not has_credentials \
            and client_auth != "required":
        warnings.append("auth.required is on but this broker has no [sasl] credentials: as a "
                        "follower it cannot fetch from leaders that require authentication "
                        "(add a [sasl] section with a user made by `logferry user create`)")
    return warnings


# -- certificates -------------------------------------------------------------------------

_SHORT_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def certificate_principal(peercert: Mapping[str, Any] | None) -> Principal | None:
    """``User:CN=agent-1,O=logferry`` from a verified peer certificate (the dict of
    ``SSLSocket.getpeercert()``): its subject in RFC 4514 form, most specific first."""
    subject = (peercert or {}).get("subject")
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return Principal("User", ",".join(rdns))


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


# -- SCRAM, server side -------------------------------------------------------------------


def scram_username(client_first: str) -> str:
    """The user name of a SCRAM client-first message (``n,,n=<name>,r=<nonce>``),
    unescaped; AuthenticationError when the message is malformed."""
    parts = client_first.split(",", 3)
    if len(parts) < 4 or not parts[2].startswith("n="):
        raise AuthenticationError("malformed SCRAM client-first message")
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")


CredentialLookup = Callable[[str], Awaitable[Mapping[str, ScramCredential] | None]]


class Authenticator:
    """Broker-wide: the mechanisms offered, the credential cache, failure accounting."""

    MAX_CACHED_USERS = 10_000
    FAILURE_LOG_INTERVAL_S = 10.0

    def __init__(self, config: AuthConfig, lookup: CredentialLookup,
                 failures: Any, tls: bool, client_auth: str = "none"):
        self.config = config
        self.tls = tls
        self.client_auth = client_auth
        self._lookup = lookup
        self._cache: OrderedDict[str, tuple[float, Mapping[str, ScramCredential] | None]] = \
            OrderedDict()
        self.failures = failures
        """Counter: labels (("mechanism", m),) -> failed authentications."""
        self._secret = secrets.token_bytes(32)
        self._last_log = -self.FAILURE_LOG_INTERVAL_S
        self._unlogged = 0

    async def credentials(self, user: str) -> Mapping[str, ScramCredential] | None:
        """The user's credentials (None: unknown), from the cache when fresh."""
        now = time.monotonic()
        cached = self._cache.get(user)
        if cached is not None and cached[0] > now:
            return cached[1]
        found = await self._lookup(user)
        if self.config.credential_cache_s > 0:
            self._cache[user] = (now + self.config.credential_cache_s, found)
            self._cache.move_to_end(user)
            while len(self._cache) > self.MAX_CACHED_USERS:
                self._cache.popitem(last=False)
        return found

    def decoy(self, mechanism: str, user: str) -> ScramCredential:
        """Made-up credentials for an unknown user: the same salt for the same name, so
        that the exchange looks like a real user's until the proof fails."""
        digest = hashlib.sha512 if mechanism.endswith("512") else hashlib.sha256
        salt = hmac.new(self._secret, f"salt:{mechanism}:{user}".encode(), digest).digest()[:16]
        key = hmac.new(self._secret, f"key:{mechanism}:{user}".encode(), digest).digest()
        return ScramCredential(salt, key, key, DEFAULT_ITERATIONS)

    def failed(self, peer: str, mechanism: str, user: str) -> None:
        """Count a failed authentication; log it, at most once per interval."""
        self.failures[(("mechanism", mechanism),)] += 1
        now = time.monotonic()
        if now - self._last_log < self.FAILURE_LOG_INTERVAL_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more failures since the last line)" if self._unlogged else ""
        self._last_log, self._unlogged = now, 0
        log.warning("authentication failed: %s as %r with %s%s", peer, user[:128], mechanism, more)



class ScramExchange:
    """The server side of one SCRAM exchange (RFC 5802, 7677), whichever protocol
    carries its messages: logferry's SaslAuthenticate (api 11) and Kafka's (api 36)
    run the same code against the same credentials.

    :meth:`first` answers the client-first message, :meth:`final` the client-final
    one. Every failure the client can cause is the one :class:`AuthenticationError`
    (:meth:`failure`): malformed messages, a wrong proof, and an unknown user, who gets
    made-up credentials (:meth:`Authenticator.decoy`) and fails at the proof like a
    wrong password. The caller counts failures (:meth:`Authenticator.failed`).
    """

    __slots__ = ("authenticator", "mechanism", "user", "_server")

    def __init__(self, authenticator: Authenticator, mechanism: str):
        self.authenticator = authenticator
        self.mechanism = mechanism
        self.user = ""
        """The user name of the client-first message ("" before it is read)."""
        self._server: Any = None

    async def first(self, token: bytes) -> bytes:
        """The server-first message for the client-first ``token``. Raises
        AuthenticationError, or another LogferryError when the credentials cannot be
        read (ZooKeeper unreachable: not the client's fault)."""
        try:
            client_first = token.decode("utf-8")
            self.user = scram_username(client_first)
        except (UnicodeDecodeError, AuthenticationError):
            raise self.failure() from None
        found = await self.authenticator.credentials(self.user)
        mechanism = self.mechanism
        credential = (found or {}).get(mechanism) or \
            self.authenticator.decoy(mechanism, self.user)
        try:
            self._server = ScramMechanism(mechanism).make_server(
                lambda _name: (credential.salt, credential.stored_key, credential.server_key,
                               credential.iterations))
            self._server.set_client_first(client_first)
            return str(self._server.get_server_first()).encode("utf-8")
        except ScramException:
            raise self.failure() from None

    def final(self, token: bytes) -> bytes:
        """The server-final message for the client-final ``token`` (its proof checked);
        AuthenticationError when the proof is wrong or the exchange is not at that step."""
        server, self._server = self._server, None
        if server is None:
            raise self.failure()
        try:
            client_final = token.decode("utf-8")
            _accept_repeated_client_nonce(server, client_final)
            server.set_client_final(client_final)
            return str(server.get_server_final()).encode("utf-8")
        except (UnicodeDecodeError, ScramException):
            raise self.failure() from None

    def failure(self) -> AuthenticationError:
        """The one error of a failed exchange: it says no more than SCRAM does."""
        return AuthenticationError(f"authentication failed: unknown user or wrong password "
                                   f"for {self.user[:128]!r} with {self.mechanism}")

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


MAX_ANNOUNCED = 1000
_announced: set[Principal] = set()


def announce(principal: Principal, peer: str, how: str) -> None:
    """Log a principal's first authenticated connection (INFO, once per principal per
    process, for the first :data:`MAX_ANNOUNCED`; DEBUG after), so an operator sees
    who connects without a line per connection."""
    if principal not in _announced and len(_announced) < MAX_ANNOUNCED:
        _announced.add(principal)
        log.info("first connection of %s (from %s, by %s)", principal, peer, how)
    else:
        log.debug("%s authenticated as %s by %s", peer, principal, how)


class AuthChannel(Protocol):
    """What authentication needs from a connection."""

    peer: str
    principal: Principal
    tasks: set[asyncio.Task[Any]]

    def close(self) -> None: ...


_START, _HANDSHAKEN, _BUSY, _FINAL, _DONE, _FAILED = range(6)


class ConnectionAuth:
    """One connection's authentication state and its SASL exchange."""

    __slots__ = ("authenticator", "channel", "authenticated", "started", "_state",
                 "_mechanism", "_server", "_user")

    def __init__(self, authenticator: Authenticator | None, channel: AuthChannel,
                 peercert: Mapping[str, Any] | None = None):
        self.authenticator = authenticator
        self.channel = channel
        self.authenticated = False
        self.started = time.monotonic()
        self._state = _START
        self._mechanism = ""
        self._server: Any = None
        self._user = ""
        principal = certificate_principal(peercert)
        if principal is not None:  # the TLS handshake verified it against ca_file
            channel.principal = principal
            self.authenticated = True
            announce(principal, channel.peer, "client certificate")

    @property
    def required(self) -> bool:
        return self.authenticator is not None and self.authenticator.config.required

    def overdue(self, now: float, timeout_s: float) -> bool:
        """True when authentication is required and this connection has not finished
        it within ``timeout_s`` of connecting (the broker then closes it: an idle
        unauthenticated connection must not hold a slot for ever)."""
        return self.required and not self.authenticated and now - self.started > timeout_s

    def admit(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> bool:
        """True when the request may go to its handler; False when it was answered
        here (a SASL request, or one refused before authentication)."""
        if head.api in SASL_APIS:
            self._sasl(head, frame, responder)
            return False
        if self.authenticated or not self.required:
            return True
        responder.fail(AuthenticationRequiredError(
            f"this broker requires authentication before {head.name} requests (SASL "
            "SCRAM, or a client certificate): give the client credentials"))
        self.channel.close()
        return False

    def _sasl(self, head: RequestHead, frame: protocol.Frame, responder: Responder) -> None:
        try:
            request = parse_request(head, frame)
            if head.api == protocol.SASL_HANDSHAKE:
                responder.answer(encode_handshake_answer(self._handshake(request)))
            else:
                self._authenticate(request, responder)
        except LogferryError as exc:
            self._fail(responder, exc)

    def _handshake(self, request: SaslHandshakeRequest) -> SaslHandshakeAnswer:
        authenticator = self.authenticator
        offered = list(authenticator.config.mechanisms) if authenticator is not None else []
        if self._state != _START:
            raise IllegalSaslStateError("a SASL handshake is allowed once per connection, "
                                        "before any exchange")
        if not offered:
            raise UnsupportedSaslMechanismError("this broker offers no SASL mechanism "
                                                "(no [auth] mechanisms in its config)")
        if request.mechanism not in offered:
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {request.mechanism!r} is not enabled; this broker offers "
                f"{', '.join(offered)}")
        self._mechanism = request.mechanism
        self._state = _HANDSHAKEN
        return SaslHandshakeAnswer(offered)

    def _authenticate(self, request: SaslAuthenticateRequest, responder: Responder) -> None:
        if self._state == _HANDSHAKEN:
            self._state = _BUSY  # the credentials are read from ZooKeeper meanwhile
            task = asyncio.get_running_loop().create_task(self._first(request.token, responder))
            self.channel.tasks.add(task)
            task.add_done_callback(self.channel.tasks.discard)
        elif self._state == _FINAL:
            self._final(request.token, responder)
        else:
            raise IllegalSaslStateError("sasl_authenticate out of order (a handshake comes "
                                        "first, one exchange per connection, each answer "
                                        "awaited)")

    async def _first(self, token: bytes, responder: Responder) -> None:
        authenticator = self.authenticator
        assert authenticator is not None
        self._server = exchange = ScramExchange(authenticator, self._mechanism)
        try:
            server_first = await exchange.first(token)
        except AuthenticationError as exc:
            self._user = exchange.user
            self._fail(responder, exc)
            return
        except LogferryError as exc:  # ZooKeeper unreachable: not the client's fault
            self._state = _FAILED
            responder.fail(exc)
            self.channel.close()
            return
        self._user = exchange.user
        self._state = _FINAL
        responder.answer(encode_authenticate_answer(SaslAuthenticateAnswer(server_first)))

    def _final(self, token: bytes, responder: Responder) -> None:
        try:
            server_final = self._server.final(token)
        except AuthenticationError as exc:
            self._fail(responder, exc)
            return
        self._state = _DONE
        self._server = None
        self.authenticated = True
        self.channel.principal = Principal("User", self._user)
        announce(self.channel.principal, self.channel.peer, self._mechanism)
        responder.answer(encode_authenticate_answer(SaslAuthenticateAnswer(server_final)))

    def _fail(self, responder: Responder, exc: LogferryError) -> None:
        """Answer the failure and close: a failed exchange cannot be resumed."""
        self._state = _FAILED
        self._server = None
        if self.authenticator is not None and isinstance(exc, AuthenticationError) \
                and self._mechanism:
            self.authenticator.failed(self.channel.peer, self._mechanism, self._user)
        responder.fail(exc)
        self.channel.close()


__all__ = ["AUTH_FIELDS", "AuthConfig", "Authenticator", "ConnectionAuth", "SASL_APIS",
           "ScramExchange",
           "auth_from_table", "auth_warnings", "certificate_principal", "scram_username"]
