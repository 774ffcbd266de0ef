"""The one SCRAM session both front ends frame (broker/server/security/scram.py), driven
directly with scramp's client: no frames, no sockets."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from scramp import ScramClient

from broker.common.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    UnsupportedSaslMechanismError,
)
from broker.common.principal import ANONYMOUS, Principal
from broker.coordination.credentials import make_credentials
from broker.server.security.authentication import AuthConfig, Authenticator
from broker.server.security.scram import SaslState, ScramSession

MECHANISM = "SCRAM-SHA-256"


def _session(peercert: dict[str, Any] | None = None) -> tuple[ScramSession, defaultdict[Any, int]]:
    stored = {"alice": make_credentials("secret", iterations=4096)}

    async def lookup(user: str) -> Any:
        return stored.get(user)

    failures: defaultdict[Any, int] = defaultdict(int)
    authenticator = Authenticator(AuthConfig(required=True), lookup, failures, tls=True)
    return ScramSession(authenticator, "10.0.0.1:4000", peercert), failures


async def _login(session: ScramSession, user: str, password: str) -> bytes:
    session.handshake(MECHANISM)
    client = ScramClient([MECHANISM], user, password)
    client.set_server_first((await session.first(client.get_client_first().encode())).decode())
    return session.final(client.get_client_final().encode())


def test_a_good_password_authenticates_the_session() -> None:
    session, failures = _session()
    assert session.principal == ANONYMOUS and session.required
    asyncio.run(_login(session, "alice", "secret"))
    assert session.state == SaslState.DONE and session.authenticated
    assert session.principal == Principal("User", "alice") and not failures


@pytest.mark.parametrize("user", ["alice", "mallory"])
def test_a_wrong_password_and_an_unknown_user_fail_alike_and_count_once(user: str) -> None:
    session, failures = _session()
    with pytest.raises(AuthenticationError, match="unknown user or wrong password"):
        asyncio.run(_login(session, user, "guess"))
    assert session.state == SaslState.FAILED and not session.authenticated
    assert sum(failures.values()) == 1


def test_out_of_order_steps_are_refused_without_counting_a_failed_login() -> None:
    session, failures = _session()
    with pytest.raises(IllegalSaslStateError):
        session.final(b"c=biws,r=x,p=y")
    assert session.state == SaslState.FAILED
    session, failures = _session()
    session.handshake(MECHANISM)
    with pytest.raises(IllegalSaslStateError):
        session.handshake(MECHANISM)
    assert not failures


def test_a_mechanism_not_offered_is_refused() -> None:
    session, _ = _session()
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256"):
        session.handshake("PLAIN")
    assert session.state == SaslState.FAILED


def test_a_verified_certificate_authenticates_at_once() -> None:
    # getpeercert() lists the subject most general first; the principal reverses it
    cert = {"subject": ((("organizationName", "logferry"),), (("commonName", "agent-1"),))}
    session, _ = _session(cert)
    assert session.authenticated and session.principal == Principal("User", "CN=agent-1,O=logferry")
    assert not session.overdue(session.started + 3600, 10)
