"""SASL SCRAM without sockets: the wire parts, the client's conversation against the
broker's per-connection state, credentials as stored, mutual-TLS principals and the
config sections."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import pytest

from broker.common.config import Validator
from broker.common.errors import (
    AuthenticationError,
    AuthenticationRequiredError,
    ConfigError,
    IllegalSaslStateError,
    InvalidRequestError,
    ProtocolError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from broker.common.principal import ANONYMOUS, Principal
from broker.common.sasl import SaslCredentials, sasl_from_table, secret_file_warning
from broker.coordination.credentials import (
    decode_credentials,
    encode_credentials,
    make_credentials,
    validate_user_name,
)
from broker.net.sasl_client import answer_error, conversation
from broker.server.native.sasl import ConnectionAuth
from broker.server.security.authentication import (
    AuthConfig,
    Authenticator,
    auth_from_table,
    certificate_principal,
    scram_username,
)
from broker.server.services.responder import Responder
from broker.wire import protocol, sasl
from broker.wire.apis import RequestHead, parse_request_head

# -- wire ------------------------------------------------------------------------------------


def test_sasl_parts_round_trip() -> None:
    assert sasl.parse_handshake_request(sasl.encode_handshake_request("SCRAM-SHA-256")) == sasl.SaslHandshakeRequest(
        "SCRAM-SHA-256"
    )
    answer = sasl.SaslHandshakeAnswer(["SCRAM-SHA-256", "SCRAM-SHA-512"])
    assert sasl.parse_handshake_answer(sasl.encode_handshake_answer(answer)) == answer
    assert sasl.parse_authenticate_request(sasl.encode_authenticate_request(b"n,,n=a,r=x")).token == b"n,,n=a,r=x"
    assert sasl.parse_authenticate_answer({"token": b"v=abc"}).token == b"v=abc"


@pytest.mark.parametrize("header", [{}, {"mechanism": 3}, {"mechanism": ""}, {"mechanism": "x" * 65}])
def test_bad_handshake_requests_are_refused(header: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        sasl.parse_handshake_request(header)


@pytest.mark.parametrize("header", [{}, {"token": "text"}, {"token": b"x" * 4097}])
def test_bad_tokens_are_refused(header: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        sasl.parse_authenticate_request(header)
    with pytest.raises(ProtocolError):
        sasl.parse_authenticate_answer(header)


def test_sasl_apis_are_served_and_codes_map_back() -> None:
    head = parse_request_head({"api": protocol.SASL_HANDSHAKE, "v": 1, "id": 7})
    assert head.name == "sasl_handshake"
    for cls in (AuthenticationError, UnsupportedSaslMechanismError, IllegalSaslStateError, AuthenticationRequiredError):
        assert 30 <= cls.code <= 34
        error = error_for_code(cls.code, "m")
        assert type(error) is cls and not error.retriable
        assert isinstance(error, AuthenticationError)


# -- the exchange, client against broker -------------------------------------------------------


class FakeChannel:
    """A connection as ConnectionAuth and Responder see it: answers are kept."""

    def __init__(self) -> None:
        self.peer = "10.0.0.9:5555"
        self.principal = ANONYMOUS
        self.tasks: set[asyncio.Task[Any]] = set()
        self.sent: list[bytes] = []
        self.closed = False

    def send(self, item: Any) -> None:
        self.sent.append(item)

    def close(self) -> None:
        self.closed = True


def _answer(raw: bytes) -> dict[str, Any]:
    decoder = protocol.FrameDecoder()
    decoder.feed(raw)
    frame = decoder.next_frame()
    assert frame is not None
    return frame.header


class Harness:
    """Runs requests through a ConnectionAuth and returns each answer's header."""

    def __init__(self, users: dict[str, str], config: AuthConfig | None = None, peercert: dict[str, Any] | None = None):
        self.stored = {name: make_credentials(pw, iterations=4096) for name, pw in users.items()}
        self.lookups: list[str] = []
        self.failures: dict[Any, float] = {}

        async def lookup(user: str) -> Any:
            self.lookups.append(user)
            return self.stored.get(user)

        from collections import defaultdict

        self.failures = defaultdict(int)
        self.authenticator = Authenticator(config or AuthConfig(required=True), lookup, self.failures, tls=True)
        self.channel = FakeChannel()
        self.auth = ConnectionAuth(self.authenticator, self.channel, peercert)
        self.ids = 0

    async def send(self, api: int, fields: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        self.ids += 1
        header = {"api": api, "v": 1, "id": self.ids, **fields}
        head = parse_request_head(header)
        responder = Responder(self.channel, head.correlation_id, head.name, lambda *_: None)
        admitted = self.auth.admit(head, protocol.Frame(header, memoryview(b"")), responder)
        while self.channel.tasks:
            await asyncio.gather(*self.channel.tasks)
        answer = _answer(self.channel.sent.pop()) if self.channel.sent else {}
        return admitted, answer

    async def login(self, credentials: SaslCredentials) -> None:
        steps = conversation(credentials, "broker test")
        request = next(steps)
        while True:
            _, answer = await self.send(*request)
            error = answer_error(answer, "broker test", credentials.username)
            if error is not None:
                raise error
            try:
                request = steps.send(answer)
            except StopIteration:
                return


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_right_password_authenticates_the_connection(mechanism: str) -> None:
    h = Harness({"alice": "s3cret pass"})

    async def run() -> None:
        await h.login(SaslCredentials("alice", "s3cret pass", mechanism))
        admitted, _ = await h.send(protocol.METADATA, {"topics": []})
        assert admitted

    asyncio.run(run())
    assert h.channel.principal == Principal("User", "alice")
    assert h.auth.authenticated and not h.channel.closed
    assert not h.failures


@pytest.mark.parametrize("user, password", [("alice", "not-Right-7"), ("mallory", "anything-9")])
def test_wrong_password_and_unknown_user_fail_alike(user: str, password: str) -> None:
    h = Harness({"alice": "right"})
    with pytest.raises(AuthenticationError) as failure:
        asyncio.run(h.login(SaslCredentials(user, password, "SCRAM-SHA-256")))
    assert type(failure.value) is AuthenticationError
    assert "unknown user or wrong password" in str(failure.value)
    assert password not in str(failure.value)
    assert h.channel.closed and h.channel.principal == ANONYMOUS
    assert h.failures == {(("mechanism", "SCRAM-SHA-256"),): 1}


def test_an_unknown_user_gets_the_same_salt_each_time() -> None:
    h = Harness({})
    first = h.authenticator.decoy("SCRAM-SHA-512", "ghost")
    assert first == h.authenticator.decoy("SCRAM-SHA-512", "ghost")
    assert first.salt != h.authenticator.decoy("SCRAM-SHA-512", "other").salt


def test_a_request_before_authentication_is_refused_and_closes() -> None:
    h = Harness({"alice": "pw"})
    admitted, answer = asyncio.run(h.send(protocol.PRODUCE, {}))
    assert not admitted
    assert answer["err"] == AuthenticationRequiredError.code
    assert "requires authentication" in answer["msg"]
    assert h.channel.closed


def test_without_required_authentication_requests_pass() -> None:
    h = Harness({}, AuthConfig(required=False))
    admitted, _ = asyncio.run(h.send(protocol.FETCH, {}))
    assert admitted and h.channel.principal == ANONYMOUS


def test_unsupported_mechanism_and_out_of_order_exchanges() -> None:
    h = Harness({"alice": "pw"}, AuthConfig(mechanisms=("SCRAM-SHA-512",), required=True))
    _, answer = asyncio.run(h.send(protocol.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"}))
    assert answer["err"] == UnsupportedSaslMechanismError.code
    assert "SCRAM-SHA-512" in answer["msg"] and h.channel.closed

    h = Harness({"alice": "pw"})
    _, answer = asyncio.run(h.send(protocol.SASL_AUTHENTICATE, {"token": b"n,,n=alice,r=x"}))
    assert answer["err"] == IllegalSaslStateError.code and h.channel.closed


def test_a_second_exchange_after_success_is_refused() -> None:
    h = Harness({"alice": "pw"})

    async def run() -> dict[str, Any]:
        await h.login(SaslCredentials("alice", "pw"))
        return (await h.send(protocol.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-512"}))[1]

    assert asyncio.run(run())["err"] == IllegalSaslStateError.code


def test_a_broker_without_sasl_says_so() -> None:
    channel = FakeChannel()
    auth = ConnectionAuth(None, channel)
    header = {"api": protocol.SASL_HANDSHAKE, "v": 1, "id": 1, "mechanism": "SCRAM-SHA-512"}
    head = RequestHead(protocol.SASL_HANDSHAKE, 1, 1)
    assert not auth.admit(
        head, protocol.Frame(header, memoryview(b"")), Responder(channel, 1, head.name, lambda *_: None)
    )
    answer = _answer(channel.sent[0])
    assert answer["err"] == UnsupportedSaslMechanismError.code
    assert "offers no SASL" in answer["msg"]


def test_credentials_are_cached_briefly() -> None:
    h = Harness({"alice": "pw"})

    async def run() -> None:
        for _ in range(3):
            await h.authenticator.credentials("alice")

    asyncio.run(run())
    assert h.lookups == ["alice"]


def test_failures_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness({})
    with caplog.at_level(logging.WARNING, logger="logferry.auth"):
        for _ in range(50):
            h.authenticator.failed("1.2.3.4:5", "SCRAM-SHA-256", "x")
    assert len(caplog.records) == 1
    assert h.failures[(("mechanism", "SCRAM-SHA-256"),)] == 50


def test_scram_username_is_unescaped() -> None:
    assert scram_username("n,,n=a=2Cb=3Dc,r=nonce") == "a,b=c"
    with pytest.raises(AuthenticationError):
        scram_username("garbage")


# -- credentials as stored -----------------------------------------------------------------------


def test_stored_credentials_round_trip_and_hold_no_password() -> None:
    creds = make_credentials("hunter2-password", iterations=4096)
    raw = encode_credentials(creds)
    assert b"hunter2" not in raw
    assert decode_credentials(raw) == creds
    assert set(creds) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert creds["SCRAM-SHA-256"].salt != creds["SCRAM-SHA-512"].salt
    assert decode_credentials(b'{"SCRAM-SHA-256": {"salt": 1}}') == {}


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 129, "é"])
def test_bad_user_names(name: str) -> None:
    with pytest.raises(ConfigError):
        validate_user_name(name)


def test_iterations_are_bounded() -> None:
    with pytest.raises(ConfigError):
        make_credentials("pw", iterations=100)


# -- mutual TLS ----------------------------------------------------------------------------------


def test_certificate_subject_is_the_principal() -> None:
    cert = {"subject": ((("organizationName", "logferry"),), (("commonName", "agent-1"),))}
    assert str(certificate_principal(cert)) == "User:CN=agent-1,O=logferry"
    odd = {"subject": ((("commonName", "a,b"),),)}
    assert str(certificate_principal(odd)) == "User:CN=a\\,b"
    assert certificate_principal(None) is None and certificate_principal({}) is None
    channel = FakeChannel()
    auth = ConnectionAuth(None, channel, cert)
    assert auth.authenticated and str(channel.principal) == "User:CN=agent-1,O=logferry"


# -- configuration -------------------------------------------------------------------------------


def test_sasl_section_sources(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    secret.chmod(0o600)
    v = Validator(file=str(tmp_path / "c.toml"), base_dir=tmp_path)
    creds = sasl_from_table(v, {"username": "a", "password_file": "pw"})
    assert creds == SaslCredentials("a", "from-file")
    assert "from-file" not in repr(creds)
    monkeypatch.setenv("PW_VAR", "from-env")
    assert (
        sasl_from_table(v, {"username": "a", "password_env": "PW_VAR", "mechanism": "SCRAM-SHA-256"}).password
        == "from-env"
    )
    assert sasl_from_table(v, {}) is None
    with pytest.raises(ConfigError, match="exactly one"):
        sasl_from_table(v, {"username": "a"})
    with pytest.raises(ConfigError, match="NOPE"):
        sasl_from_table(v, {"username": "a", "password_env": "NOPE"})
    secret.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="logferry.config"):
        sasl_from_table(v, {"username": "a", "password_file": "pw"})
    assert "chmod 600" in caplog.text


def test_secret_file_warning(tmp_path: Any) -> None:
    path = tmp_path / "broker.toml"
    path.write_text("")
    os.chmod(path, 0o600)
    assert secret_file_warning(path) is None
    os.chmod(path, 0o640)
    assert "group or others" in (secret_file_warning(path) or "")


def test_auth_table_rules() -> None:
    v = Validator()
    assert auth_from_table(v, {}, True, "none") is None
    config = auth_from_table(v, {"required": True}, True, "none")
    assert config == AuthConfig(required=True)
    with pytest.raises(ConfigError, match="SASL needs TLS"):
        auth_from_table(v, {"required": True}, False, "none")
    assert auth_from_table(v, {"allow_plaintext": True}, False, "none") is not None
    with pytest.raises(ConfigError, match="nothing to authenticate"):
        auth_from_table(v, {"mechanisms": [], "required": True}, True, "none")
    assert auth_from_table(v, {"mechanisms": [], "required": True}, True, "required")


def test_agent_and_mirror_take_a_sasl_section(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.config import parse_config as agent_config
    from mirror.config import parse_config as mirror_config
    from mirror.errors import MirrorConfigError

    monkeypatch.setenv("AGENT_PW", "agent-secret")
    agent = agent_config(
        {
            "state_dir": "/tmp/x",
            "cluster": {"brokers": ["127.0.0.1:9092"]},
            "sources": [{"pattern": "/var/log/*.log", "topic": "app"}],
            "sasl": {"username": "agent", "password_env": "AGENT_PW"},
        }
    )
    assert agent.sasl == SaslCredentials("agent", "agent-secret")
    mirror = mirror_config(
        {
            "source": {
                "zk_connect": "h:1/live",
                "sasl": {"username": "mirror", "password_env": "AGENT_PW", "mechanism": "SCRAM-SHA-256"},
            },
            "target": {"zk_connect": "h:1/analysis"},
            "mirror": {"topics": ["t"]},
        }
    )
    assert mirror.source_sasl == SaslCredentials("mirror", "agent-secret", "SCRAM-SHA-256")
    assert mirror.target_sasl is None
    with pytest.raises(MirrorConfigError, match="target.sasl"):
        mirror_config(
            {
                "source": {"zk_connect": "h:1/live"},
                "target": {"zk_connect": "h:1/analysis", "sasl": {"username": "m"}},
                "mirror": {"topics": ["t"]},
            }
        )


def test_an_unauthenticated_connection_is_overdue_after_the_timeout() -> None:
    h = Harness({})
    start = h.auth.started
    assert not h.auth.overdue(start + 5, 10) and h.auth.overdue(start + 11, 10)
    assert not ConnectionAuth(None, FakeChannel()).overdue(start + 11, 10)


def test_auth_warnings() -> None:
    from broker.server.security.authentication import auth_warnings

    assert auth_warnings(None, False) == []
    assert auth_warnings(AuthConfig(), True) == []
    assert "plaintext" in auth_warnings(AuthConfig(allow_plaintext=True), False)[0]
    assert "[sasl]" in auth_warnings(AuthConfig(required=True), True)[0]
    assert auth_warnings(AuthConfig(required=True), True, has_credentials=True) == []
    assert auth_warnings(AuthConfig(required=True), True, client_auth="required") == []


def test_cli_sasl_options(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from broker.cli.tls_args import add_sasl_args, sasl_from_args

    parser = argparse.ArgumentParser()
    add_sasl_args(parser)
    assert sasl_from_args(parser.parse_args([])) is None
    secret = tmp_path / "pw"
    secret.write_text("pw-from-file\n")
    secret.chmod(0o600)
    creds = sasl_from_args(parser.parse_args(["--sasl-user", "u", "--sasl-password-file", str(secret)]))
    assert creds == SaslCredentials("u", "pw-from-file")
    monkeypatch.setenv("CLI_PW", "pw-from-env")
    creds = sasl_from_args(
        parser.parse_args(["--sasl-user", "u", "--sasl-password-env", "CLI_PW", "--sasl-mechanism", "SCRAM-SHA-256"])
    )
    assert creds == SaslCredentials("u", "pw-from-env", "SCRAM-SHA-256")
    with pytest.raises(ConfigError, match="never taken from the command line"):
        sasl_from_args(parser.parse_args(["--sasl-user", "u"]))
    with pytest.raises(ConfigError, match="--sasl-password-env"):
        sasl_from_args(parser.parse_args(["--sasl-user", "u", "--sasl-password-env", "UNSET_X"]))
    with pytest.raises(SystemExit):  # no option takes the password itself
        parser.parse_args(["--sasl-password", "x"])
