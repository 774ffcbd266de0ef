"""Who is on the other end of each connection: SASL SCRAM and mutual-TLS principals.

Configured by the broker's ``[auth]`` table (docs/security.md, "Authentication")::

    [auth]
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]  # SASL mechanisms offered
    required = true           # every request but SASL's needs an authenticated connection
    allow_plaintext = false   # SASL on a listener without TLS (passwords' proofs in clear)
    credential_cache_s = 10   # how long a user's credentials read from ZooKeeper are reused

Each connection has a :class:`~broker.server.security.scram.ScramSession` (the
exchange's state machine, shared by both front ends), wrapped by its front end's SASL
framing (``native/sasl.py``, ``kafka/sasl.py``): it refuses any other request before
success when authentication is required, and sets ``connection.principal`` on success:
``User:<name>`` after SCRAM, ``User:<subject>`` (``User:CN=agent-1,O=logferry``, RFC 4514
order) when a TLS client certificate was verified. SCRAM after a certificate replaces
the certificate's principal.

The broker-wide :class:`Authenticator` reads credentials from ZooKeeper
(:mod:`broker.coordination.credentials`) through a short cache, counts failures
(``logferry_broker_authentication_failures_total``) and logs them at a bounded rate.
A failure says no more than SCRAM allows: an unknown user gets a made-up salt (the
same for the same name) and fails at the proof like a wrong password, with the same
message.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.common.config import BOOL, NONNEG_NUMBER, Check, Validator, fields
from broker.common.errors import AuthenticationError
from broker.common.principal import Principal
from broker.common.ratelimit import RateLimitedLog
from broker.common.sasl import MECHANISMS
from broker.coordination.credentials import DEFAULT_ITERATIONS, ScramCredential

log = logging.getLogger("logferry.auth")

AUTH_FIELDS = fields(
    mechanisms=Check(
        lambda v: isinstance(v, list) and all(m in MECHANISMS for m in v),
        f"a list of SASL mechanisms from {list(MECHANISMS)}",
    ),
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


def auth_from_table(
    validator: Validator, table: Mapping[str, Any], tls_on: bool, client_auth: str
) -> AuthConfig | None:
    """A checked ``[auth]`` table as an :class:`AuthConfig` (None when absent).

    Refuses settings that cannot work: authentication required with nothing to
    authenticate by, or SASL passwords' proofs over plaintext unless
    ``allow_plaintext`` says so."""
    if not table:
        return None
    config = AuthConfig(
        mechanisms=tuple(table.get("mechanisms", MECHANISMS)),
        required=table.get("required", False),
        allow_plaintext=table.get("allow_plaintext", False),
        credential_cache_s=float(table.get("credential_cache_s", 10.0)),
    )
    if config.mechanisms and not tls_on and not config.allow_plaintext:
        validator.fail(
            "auth.mechanisms",
            "SASL needs TLS ([tls] enabled = true); set "
            "auth.allow_plaintext = true to offer it on a plaintext port anyway "
            "(anyone on the network then sees who logs in)",
        )
    if config.required and not config.mechanisms and client_auth != "required":
        validator.fail(
            "auth.required", 'nothing to authenticate with: list auth.mechanisms or set tls.client_auth = "required"'
        )
    return config


def auth_warnings(
    config: AuthConfig | None, tls_on: bool, client_auth: str = "none", has_credentials: bool = False
) -> list[str]:
    """Valid but unwise settings, one sentence each (logged at start)."""
    warnings = []
    if config is not None and config.mechanisms and not tls_on:
        warnings.append(
            "auth.allow_plaintext: SASL is offered on a plaintext port: user names "
            "and SCRAM exchanges cross the network in clear (enable [tls])"
        )
    if config is not None and config.required and not has_credentials and client_auth != "required":
        warnings.append(
            "auth.required is on but this broker has no [sasl] credentials: as a "
            "follower it cannot fetch from leaders that require authentication "
            "(add a [sasl] section with a user made by `logferry user create`)"
        )
    return warnings


# -- certificates -------------------------------------------------------------------------

_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


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

    def __init__(
        self, config: AuthConfig, lookup: CredentialLookup, failures: Any, tls: bool, client_auth: str = "none"
    ):
        self.config = config
        self.tls = tls
        self.client_auth = client_auth
        self._lookup = lookup
        self._cache: OrderedDict[str, tuple[float, Mapping[str, ScramCredential] | None]] = OrderedDict()
        self.failures = failures
        """Counter: labels (("mechanism", m),) -> failed authentications."""
        self._secret = secrets.token_bytes(32)
        self._failure_log = RateLimitedLog(log, self.FAILURE_LOG_INTERVAL_S, "more failures since the last line")

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
        self._failure_log.warning("authentication failed: %s as %r with %s", peer, user[:128], mechanism)


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


__all__ = [
    "AUTH_FIELDS",
    "AuthConfig",
    "Authenticator",
    "announce",
    "auth_from_table",
    "auth_warnings",
    "certificate_principal",
    "scram_username",
]
