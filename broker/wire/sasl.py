"""The SASL apis, typed: sasl_handshake (10) and sasl_authenticate (11).

A client that authenticates sends, before anything else on the connection:

1. ``sasl_handshake`` ``{mechanism}``; the answer lists the ``mechanisms`` the broker
   enables (error 31 when the asked one is not among them);
2. ``sasl_authenticate`` ``{token}`` as many times as the mechanism needs (SCRAM:
   twice, client-first then client-final), each answer carrying the broker's
   ``token`` (server-first, then server-final). A failed exchange is answered with
   error 30 and the connection closes.

Tokens are the mechanism's own messages as bytes (SCRAM's are UTF-8 text, RFC 5802).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.wire.fields import ANSWER, REQUEST, ErrorClass, as_list, as_str, header_of, shown

MAX_TOKEN_BYTES = 4096
"""No SCRAM message comes close (a user name, a nonce, a proof: a few hundred bytes);
a larger token is refused before a SCRAM parser sees it."""
MAX_MECHANISM_CHARS = 64


class SaslHandshakeRequest(NamedTuple):
    """Which mechanism the client will authenticate with."""

    mechanism: str
    """``SCRAM-SHA-256`` or ``SCRAM-SHA-512``."""


class SaslHandshakeAnswer(NamedTuple):
    """What the broker offers."""

    mechanisms: list[str]
    """The mechanisms this broker enables (empty: it offers no SASL)."""


class SaslAuthenticateRequest(NamedTuple):
    """One message of the client's side of the exchange."""

    token: bytes


class SaslAuthenticateAnswer(NamedTuple):
    """One message of the broker's side of the exchange."""

    token: bytes


def encode_handshake_request(mechanism: str) -> dict[str, Any]:
    """The fields of a sasl_handshake request."""
    return {"mechanism": mechanism}


def parse_handshake_request(header: dict[str, Any]) -> SaslHandshakeRequest:
    """Check a sasl_handshake request (InvalidRequestError)."""
    mechanism = as_str(header_of(header).get("mechanism"), "mechanism")
    if not 0 < len(mechanism) <= MAX_MECHANISM_CHARS:
        raise REQUEST(f"mechanism must be 1 to {MAX_MECHANISM_CHARS} characters")
    return SaslHandshakeRequest(mechanism)


def encode_handshake_answer(answer: SaslHandshakeAnswer) -> dict[str, Any]:
    """The fields of a sasl_handshake answer."""
    return {"mechanisms": list(answer.mechanisms)}


def parse_handshake_answer(header: dict[str, Any]) -> SaslHandshakeAnswer:
    """Read a sasl_handshake answer (ProtocolError if malformed)."""
    mechanisms = as_list(header_of(header, ANSWER).get("mechanisms", []), "mechanisms", ANSWER)
    return SaslHandshakeAnswer([as_str(m, "a mechanism", ANSWER) for m in mechanisms])


def encode_authenticate_request(token: bytes) -> dict[str, Any]:
    """The fields of a sasl_authenticate request."""
    return {"token": token}


def parse_authenticate_request(header: dict[str, Any]) -> SaslAuthenticateRequest:
    """Check a sasl_authenticate request (InvalidRequestError)."""
    return SaslAuthenticateRequest(_token(header_of(header).get("token"), REQUEST))


def encode_authenticate_answer(answer: SaslAuthenticateAnswer) -> dict[str, Any]:
    """The fields of a sasl_authenticate answer."""
    return {"token": answer.token}


def parse_authenticate_answer(header: dict[str, Any]) -> SaslAuthenticateAnswer:
    """Read a sasl_authenticate answer (ProtocolError if malformed)."""
    return SaslAuthenticateAnswer(_token(header_of(header, ANSWER).get("token"), ANSWER))


def _token(value: Any, error: ErrorClass) -> bytes:
    if type(value) is not bytes:
        raise error(f"token must be bytes, got {shown(value)}")
    if len(value) > MAX_TOKEN_BYTES:
        raise error(f"token of {len(value)} bytes is over {MAX_TOKEN_BYTES}")
    return value


__all__ = [
    "MAX_TOKEN_BYTES",
    "SaslAuthenticateAnswer",
    "SaslAuthenticateRequest",
    "SaslHandshakeAnswer",
    "SaslHandshakeRequest",
    "encode_authenticate_answer",
    "encode_authenticate_request",
    "encode_handshake_answer",
    "encode_handshake_request",
    "parse_authenticate_answer",
    "parse_authenticate_request",
    "parse_handshake_answer",
    "parse_handshake_request",
]
