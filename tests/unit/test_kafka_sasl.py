"""SASL SCRAM on the Kafka listener without sockets: Kafka's SaslHandshake and
SaslAuthenticate frames (kio's schemas) against :class:`KafkaSasl`, with the native
listener's :class:`Authenticator` and credentials, and scramp's client as the other end."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from scramp import ScramClient

from broker.common.principal import ANONYMOUS, Principal
from broker.coordination.credentials import make_credentials
from broker.server.kafka import protocol
from broker.server.kafka.protocol import Api
from broker.server.kafka.sasl import KafkaSasl
from broker.server.security.authentication import AuthConfig, Authenticator

PASSWORD = "correct horse battery staple"


class FakeChannel:
    def __init__(self) -> None:
        self.peer = "10.0.0.9:5555"
        self.principal = ANONYMOUS
        self.closed = False

    def close(self) -> None:
        self.closed = True


def decode(api: int, version: int, frame: bytes) -> Any:
    schema = protocol.response_schema(api, version)
    _, used = entity_reader(schema.__header_schema__)(frame, 4)
    body, _ = entity_reader(schema)(frame, 4 + used)
    return body


class Harness:
    def __init__(
        self,
        users: dict[str, str] | None = None,
        config: AuthConfig | None = None,
        with_sasl: bool = True,
        peercert: dict[str, Any] | None = None,
        timeout_s: float = 0.0,
    ):
        stored = {name: make_credentials(pw, iterations=4096) for name, pw in (users or {}).items()}

        async def lookup(user: str) -> Any:
            return stored.get(user)

        self.failures: defaultdict[Any, int] = defaultdict(int)
        self.authenticator = (
            Authenticator(config or AuthConfig(required=True), lookup, self.failures, tls=True) if with_sasl else None
        )
        self.channel = FakeChannel()
        self.sasl = KafkaSasl(self.authenticator, self.channel, peercert, timeout_s)
        self.corr = 0

    async def send(self, api: int, version: int, **fields: Any) -> tuple[Any, bool]:
        self.corr += 1
        body = load_request_schema(api, version)(**fields)
        frame, close = await self.sasl.handle(protocol.Request(api, version, self.corr, "test", body))
        return decode(api, version, frame), close

    async def login(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", version: int = 2
    ) -> tuple[Any, bool]:
        """The exchange as librdkafka runs it; the last answer and its close flag."""
        answer, close = await self.send(Api.SASL_HANDSHAKE, 1, mechanism=mechanism)
        assert answer.error_code == ErrorCode.none and not close
        assert mechanism in answer.mechanisms
        client = ScramClient([mechanism], user, password)
        answer, close = await self.send(Api.SASL_AUTHENTICATE, version, auth_bytes=client.get_client_first().encode())
        if answer.error_code != ErrorCode.none:
            return answer, close
        client.set_server_first(answer.auth_bytes.decode())
        answer, close = await self.send(Api.SASL_AUTHENTICATE, version, auth_bytes=client.get_client_final().encode())
        if answer.error_code == ErrorCode.none:
            client.set_server_final(answer.auth_bytes.decode())  # the broker's proof
        return answer, close


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_right_password_authenticates_kafka_clients(mechanism: str, version: int) -> None:
    async def run() -> None:
        h = Harness({"alice": PASSWORD})
        assert not h.sasl.admits(Api.METADATA)  # required, not yet done
        answer, close = await h.login("alice", PASSWORD, mechanism, version)
        assert answer.error_code == ErrorCode.none and not close
        if version >= 1:
            assert answer.session_lifetime.total_seconds() == 0  # no re-authentication
        assert h.sasl.authenticated and h.channel.principal == Principal("User", "alice")
        assert h.sasl.admits(Api.METADATA) and h.sasl.admits(Api.PRODUCE)
        assert not h.failures and not h.channel.closed

    asyncio.run(run())


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    async def attempt(users: dict[str, str]) -> tuple[Any, bool, Harness]:
        h = Harness(users)
        answer, close = await h.login("bob", "guess")
        return answer, close, h

    async def run() -> None:
        wrong, close_wrong, h_wrong = await attempt({"bob": PASSWORD})
        unknown, close_unknown, h_unknown = await attempt({"alice": PASSWORD})
        for answer, close, h in ((wrong, close_wrong, h_wrong), (unknown, close_unknown, h_unknown)):
            assert answer.error_code == ErrorCode.sasl_authentication_failed  # 58
            assert close and not h.sasl.authenticated and h.channel.principal == ANONYMOUS
            assert h.failures == {(("mechanism", "SCRAM-SHA-256"),): 1}
            assert "unknown user or wrong password" in answer.error_message
        assert wrong.error_message == unknown.error_message  # no hint which part was wrong

    asyncio.run(run())


def test_malformed_tokens_fail_as_authentication_failures() -> None:
    async def run() -> None:
        h = Harness({"alice": PASSWORD})
        await h.send(Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        answer, close = await h.send(Api.SASL_AUTHENTICATE, 2, auth_bytes=b"\xff\xfenot scram")
        assert answer.error_code == ErrorCode.sasl_authentication_failed and close
        # and after a failure, nothing more: the state is final
        answer, close = await h.send(Api.SASL_AUTHENTICATE, 2, auth_bytes=b"n,,n=a,r=x")
        assert answer.error_code == ErrorCode.illegal_sasl_state and close

    asyncio.run(run())


def test_before_authentication_only_api_versions_and_sasl_pass() -> None:
    async def run() -> None:
        h = Harness({"alice": PASSWORD})
        assert h.sasl.admits(Api.API_VERSIONS)
        assert h.sasl.admits(Api.SASL_HANDSHAKE) and h.sasl.admits(Api.SASL_AUTHENTICATE)
        for api in (Api.METADATA, Api.PRODUCE, Api.FETCH, Api.FIND_COORDINATOR, 32, 999):
            assert not h.sasl.admits(api)
        await h.send(Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        assert not h.sasl.admits(Api.API_VERSIONS)  # mid-exchange: SASL only
        offered = Harness({"alice": PASSWORD}, AuthConfig(required=False))
        assert offered.sasl.admits(Api.METADATA)  # offered, not required: anonymous passes
        assert offered.channel.principal == ANONYMOUS

    asyncio.run(run())


def test_unsupported_mechanism_and_out_of_order_requests() -> None:
    async def run() -> None:
        h = Harness({"alice": PASSWORD}, AuthConfig(mechanisms=("SCRAM-SHA-512",), required=True))
        answer, close = await h.send(Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism and close
        assert answer.mechanisms == ("SCRAM-SHA-512",)
        early = Harness({"alice": PASSWORD})
        answer, close = await early.send(Api.SASL_AUTHENTICATE, 1, auth_bytes=b"n,,n=a,r=x")
        assert answer.error_code == ErrorCode.illegal_sasl_state and close
        done = Harness({"alice": PASSWORD})
        await done.login("alice", PASSWORD)
        answer, close = await done.send(Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        assert answer.error_code == ErrorCode.illegal_sasl_state and close

    asyncio.run(run())


def test_a_listener_without_sasl_offers_no_mechanism_and_admits_everyone() -> None:
    async def run() -> None:
        h = Harness(with_sasl=False)
        assert h.sasl.admits(Api.METADATA) and not h.sasl.required
        answer, close = await h.send(Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism and close
        assert answer.mechanisms == ()

    asyncio.run(run())


def test_an_unauthenticated_connection_is_closed_after_the_timeout() -> None:
    async def run() -> None:
        slow = Harness({"alice": PASSWORD}, timeout_s=0.05)
        quick = Harness({"alice": PASSWORD}, timeout_s=0.05)
        await quick.login("alice", PASSWORD)
        await asyncio.sleep(0.15)
        assert slow.channel.closed and not quick.channel.closed
        stopped = Harness({"alice": PASSWORD}, timeout_s=0.05)
        stopped.sasl.stop()  # the connection went away first
        await asyncio.sleep(0.1)
        assert not stopped.channel.closed

    asyncio.run(run())


def test_a_client_certificate_authenticates_as_its_subject() -> None:
    async def run() -> None:
        cert = {"subject": ((("organizationName", "logferry"),), (("commonName", "kafka-client"),))}
        h = Harness({}, peercert=cert, timeout_s=0.05)
        assert h.sasl.authenticated and h.sasl.admits(Api.PRODUCE)
        assert h.channel.principal == Principal("User", "CN=kafka-client,O=logferry")
        await asyncio.sleep(0.1)
        assert not h.channel.closed

    asyncio.run(run())


def test_sasl_apis_are_advertised_at_the_versions_clients_use() -> None:
    assert protocol.SUPPORTED[Api.SASL_HANDSHAKE] == (0, 1)  # as Kafka 3 lists it
    assert protocol.SUPPORTED[Api.SASL_AUTHENTICATE] == (0, 2)


def test_a_v0_handshake_is_refused_unframed_tokens_are_not_served() -> None:
    async def run() -> None:
        h = Harness({"alice": PASSWORD})
        answer, close = await h.send(Api.SASL_HANDSHAKE, 0, mechanism="SCRAM-SHA-256")
        assert answer.error_code == ErrorCode.unsupported_version and close
        assert not h.sasl.authenticated

    asyncio.run(run())


def _old_librdkafka_client_final(mechanism: str, user: str, password: str, client_first: str, server_first: str) -> str:
    """The client-final message of librdkafka before 2.6.1, which repeats the client
    nonce (``r=<client nonce><server nonce>``, the server nonce already starting with
    the client's); the proof is computed over the message as sent, as it does."""
    import base64
    import hashlib
    import hmac

    digest = hashlib.sha512 if mechanism.endswith("512") else hashlib.sha256
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    client_nonce = client_first.split("r=", 1)[1]
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={client_nonce}{attrs['r']}"
    auth_message = f"{client_first[3:]},{server_first},{without_proof}"
    signature = hmac.new(stored_key, auth_message.encode(), digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_old_librdkafka_repeating_the_client_nonce_is_accepted(mechanism: str) -> None:
    async def run(password: str) -> Any:
        h = Harness({"kcat": PASSWORD})
        await h.send(Api.SASL_HANDSHAKE, 1, mechanism=mechanism)
        client_first = "n,,n=kcat,r=abcdefghijklmnop"
        answer, _ = await h.send(Api.SASL_AUTHENTICATE, 0, auth_bytes=client_first.encode())
        final = _old_librdkafka_client_final(mechanism, "kcat", password, client_first, answer.auth_bytes.decode())
        answer, close = await h.send(Api.SASL_AUTHENTICATE, 0, auth_bytes=final.encode())
        return answer.error_code, close, h.sasl.authenticated

    assert asyncio.run(run(PASSWORD)) == (ErrorCode.none, False, True)
    # the relaxed nonce relaxes nothing else: a wrong password still fails
    assert asyncio.run(run("wrong")) == (ErrorCode.sasl_authentication_failed, True, False)


def test_a_nonce_without_the_servers_part_still_fails() -> None:
    async def run() -> Any:
        h = Harness({"kcat": PASSWORD})
        await h.send(Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        client_first = "n,,n=kcat,r=abcdefghijklmnop"
        answer, _ = await h.send(Api.SASL_AUTHENTICATE, 0, auth_bytes=client_first.encode())
        server_first = answer.auth_bytes.decode()
        forged = server_first.replace("r=abcdefghijklmnop", "r=abcdefghijklmnopXXXX", 1)
        final = _old_librdkafka_client_final(
            "SCRAM-SHA-256", "kcat", PASSWORD, client_first, forged
        )  # a nonce the server never sent
        answer, close = await h.send(Api.SASL_AUTHENTICATE, 0, auth_bytes=final.encode())
        return answer.error_code, close

    assert asyncio.run(run()) == (ErrorCode.sasl_authentication_failed, True)
