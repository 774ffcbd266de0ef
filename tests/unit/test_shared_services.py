"""Both front ends serve a request through the same service code: the native front end
(msgpack) and the Kafka front end (kio) each decode their protocol into the same typed
request, call the same service method, get the same typed result, and only then encode
it in their own protocol (issue 34).

Each case runs the same request through both front ends, each against a fresh broker
state (so offsets agree), and records what the service was called with and what it
returned. SASL SCRAM is per-connection state rather than a service, but it is shared the
same way: each front end frames the one sans-IO ``ScramSession``, whose calls are
recorded here as the services' are."""

from __future__ import annotations

import asyncio
import io
from collections import defaultdict
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, NamedTuple, Protocol

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32
from scramp import ScramClient

from broker.common.errors import AuthenticationError, LogferryError
from broker.common.principal import ANONYMOUS, Principal
from broker.coordination.credentials import make_credentials
from broker.server.kafka import convert
from broker.server.kafka.protocol import Api, Request, response_schema
from broker.server.kafka.protocol import parse_request as parse_kafka_request
from broker.server.kafka.record_batch import encode_record_batch
from broker.server.kafka.sasl import KafkaSasl
from broker.server.kafka.service import KafkaService, _Channel
from broker.server.native.sasl import ConnectionAuth
from broker.server.security.authentication import AuthConfig, Authenticator
from broker.server.security.scram import SaslState, ScramSession
from broker.server.services.responder import Responder
from broker.server.services.results import MetadataResult, ProduceResult
from broker.wire import protocol, sasl
from broker.wire.apis import parse_request_head
from broker.wire.metadata import MetadataRequest, parse_metadata_answer
from broker.wire.produce import MessageSet, ProduceRequest, parse_produce_answer
from tests.unit.test_authorizer import Setup
from tests.unit.test_kafka_sasl import decode as decode_kafka_answer
from tests.unit.test_server_handlers import Channel


@pytest.fixture
def brokers(tmp_path):
    """Two fresh broker states (no ACLs: everything allowed for a super user)."""
    made = [Setup(tmp_path / name, [], super_users=["User:ANONYMOUS"]) for name in "ab"]
    yield made
    for s in made:
        s.close()


def _kafka(s: Setup) -> KafkaService:
    return KafkaService(
        s.admin.config,
        s.produce.router,
        s.produce,
        s.fetch,
        s.admin,  # type: ignore[arg-type]
        s.admin.view,
        lambda *a: None,
    )


def _spy_produce(s: Setup) -> list[tuple[ProduceRequest, ProduceResult]]:
    """Every call of ``ProduceService.produce`` with the result it delivered."""
    calls: list[tuple[ProduceRequest, ProduceResult]] = []
    real = s.produce.produce

    def produce(request: ProduceRequest, principal: Any, reply: Any) -> None:
        def record(result: ProduceResult) -> None:
            calls.append((request, result))
            reply(result)

        real(request, principal, record)

    s.produce.produce = produce  # type: ignore[method-assign]
    return calls


def _spy_metadata(s: Setup) -> list[tuple[Any, MetadataResult]]:
    calls: list[tuple[Any, MetadataResult]] = []
    real = s.admin.metadata

    async def metadata(query: Any, principal: Any) -> MetadataResult:
        result = await real(query, principal)
        calls.append((query, result))
        return result

    s.admin.metadata = metadata  # type: ignore[method-assign]
    return calls


def _responder(channel: Channel) -> Responder:
    channel.principal = ANONYMOUS  # type: ignore[misc]
    return Responder(channel, 1, "test", lambda *a: None)


def test_a_kafka_and_a_native_produce_of_one_batch_run_the_same_service_call(brokers) -> None:
    kafka_side, native_side = brokers
    batch = bytes(encode_record_batch(0, 2, 1_700_000_000_000, None, None, [b"a", b"b", b"c"]))
    stored = memoryview(convert.store_batches(batch))  # the batch as the broker keeps it

    kafka_calls = _spy_produce(kafka_side)
    body = SimpleNamespace(
        acks=1, topic_data=[SimpleNamespace(name="web-a", partition_data=[SimpleNamespace(index=0, records=batch)])]
    )
    channel = _Channel("peer", ANONYMOUS, lambda: None)
    frame = asyncio.run(_kafka(kafka_side).produce(Request(Api.PRODUCE, 9, 1, "t", body), channel))
    schema = response_schema(Api.PRODUCE, 9)
    _, used = entity_reader(schema.__header_schema__)(frame[4:], 0)  # after the frame's size
    answer, _ = entity_reader(schema)(frame[4:], used)
    (topic,) = answer.responses
    (part,) = topic.partition_responses
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)

    native_calls = _spy_produce(native_side)
    wire = Channel()
    native_side.native.run_produce(ProduceRequest(1, [MessageSet("web-a", 0, stored)], None), _responder(wire))
    (frame,) = wire.frames()
    (native_part,) = parse_produce_answer(frame.header)
    assert (native_part.error, native_part.base_offset) == (0, 0)

    # one call each, the same typed request in and the same typed result out
    (kafka_call,) = kafka_calls
    (native_call,) = native_calls
    assert kafka_call == native_call
    assert kafka_call[1] == ProduceResult([("web-a", 0, 0, 0, None)], False)
    # and the same bytes in both logs
    assert (
        kafka_side.logs.get("web-a", 0).read_bytes(0, 1 << 16)
        == native_side.logs.get("web-a", 0).read_bytes(0, 1 << 16)
        == bytes(stored)
    )


def test_a_kafka_and_a_native_metadata_request_share_one_computed_result(brokers) -> None:
    kafka_side, native_side = brokers
    kafka_calls = _spy_metadata(kafka_side)
    body = SimpleNamespace(
        topics=[SimpleNamespace(name="web-a"), SimpleNamespace(name="nosuch")], allow_auto_topic_creation=False
    )
    answer = asyncio.run(
        _kafka(kafka_side).metadata(Request(Api.METADATA, 9, 1, "t", body), _Channel("peer", ANONYMOUS, lambda: None))
    )
    web_a, nosuch = answer.topics
    assert (web_a.name, web_a.error_code) == ("web-a", ErrorCode.none)
    assert [(p.partition_index, p.replica_nodes, p.isr_nodes) for p in web_a.partitions] == [(0, (1,), (1,))]
    assert nosuch.error_code == ErrorCode.unknown_topic_or_partition

    native_calls = _spy_metadata(native_side)
    wire = Channel()
    asyncio.run(native_side.native.handle_metadata(MetadataRequest(["web-a", "nosuch"], False), _responder(wire)))
    (frame,) = wire.frames()
    native = parse_metadata_answer(frame.header)
    assert native.topics["web-a"].replicas == {0: [1]}
    assert native.topics["nosuch"].error != 0

    (kafka_call,) = kafka_calls
    (native_call,) = native_calls
    # the same question (but for the listener it came on) and the same topics computed
    assert (kafka_call[0].topics, kafka_call[0].create) == (native_call[0].topics, native_call[0].create)
    assert (kafka_call[0].kafka, native_call[0].kafka) == (True, False)
    kafka_result, native_result = kafka_call[1], native_call[1]
    assert kafka_result.controller == native_result.controller
    assert [t[:1] + t[2:] for t in kafka_result.topics] == [t[:1] + t[2:] for t in native_result.topics]
    assert [type(t.error) for t in kafka_result.topics] == [type(t.error) for t in native_result.topics]


# -- SASL SCRAM ---------------------------------------------------------------------------

PASSWORD = "correct horse battery staple"
USERS = {"alice": make_credentials(PASSWORD, iterations=4096)}


class Step(NamedTuple):
    """One call of a :class:`ScramSession` method as a front end made it."""

    method: str
    mechanism: str
    """The session's mechanism after the call ("" before a handshake took one)."""
    raised: type[Exception] | None


def _spy_scram(monkeypatch: pytest.MonkeyPatch) -> defaultdict[ScramSession, list[Step]]:
    """Every call of ``ScramSession.handshake``, ``first`` and ``final``, by session,
    with what it raised; each delegates to the real method."""
    calls: defaultdict[ScramSession, list[Step]] = defaultdict(list)

    def sync(name: str) -> Callable[..., Any]:
        real = getattr(ScramSession, name)

        def spy(self: ScramSession, arg: Any) -> Any:
            try:
                result = real(self, arg)
            except LogferryError as exc:
                calls[self].append(Step(name, self.mechanism, type(exc)))
                raise
            calls[self].append(Step(name, self.mechanism, None))
            return result

        return spy

    real_first = ScramSession.first

    async def first(self: ScramSession, token: bytes) -> bytes:
        try:
            result = await real_first(self, token)
        except LogferryError as exc:
            calls[self].append(Step("first", self.mechanism, type(exc)))
            raise
        calls[self].append(Step("first", self.mechanism, None))
        return result

    monkeypatch.setattr(ScramSession, "handshake", sync("handshake"))
    monkeypatch.setattr(ScramSession, "first", first)
    monkeypatch.setattr(ScramSession, "final", sync("final"))
    return calls


def _authenticator(failures: defaultdict[Any, int]) -> Authenticator:
    """One listener's authenticator, as ``Broker._authenticator`` builds it: every
    listener reads the same users and counts into the broker's one failure counter."""

    async def lookup(user: str) -> Any:
        return USERS.get(user)

    return Authenticator(AuthConfig(required=True), lookup, failures, tls=True)


class FrontEnd(Protocol):
    """One listener's SASL path, as a client sees it."""

    @property
    def session(self) -> ScramSession: ...

    @property
    def principal(self) -> Principal: ...

    async def handshake(self, mechanism: str) -> bool: ...

    async def authenticate(self, token: bytes) -> bytes | None: ...


class _NativeChannel(Channel):
    """A native connection as :class:`ConnectionAuth` sees it: answers kept, tasks run."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: set[asyncio.Task[Any]] = set()


class NativeFront:
    """The native listener's SASL path: a request frame decoded as ``BrokerConnection``
    decodes it, then :meth:`ConnectionAuth.admit`, which answers SASL apis itself."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.channel = _NativeChannel()
        self.auth = ConnectionAuth(authenticator, self.channel)
        self.errors: list[int] = []
        self._ids = 0

    @property
    def session(self) -> ScramSession:
        return self.auth.session

    @property
    def principal(self) -> Principal:
        return self.channel.principal

    async def _send(self, api: int, fields: dict[str, Any]) -> dict[str, Any] | None:
        """The answer's header, None when the request was refused (its code in ``errors``)."""
        self._ids += 1
        decoder = protocol.FrameDecoder()
        decoder.feed(protocol.encode_request(api, self._ids, fields))
        frame = decoder.next_frame()
        assert frame is not None
        head = parse_request_head(frame.header)
        responder = Responder(self.channel, head.correlation_id, head.name, lambda *a: None)
        assert not self.auth.admit(head, frame, responder)  # answered here, not by a service
        while self.channel.tasks:  # the client-first answer waits for the credentials
            await asyncio.gather(*self.channel.tasks)
        (answer,) = self.channel.frames()
        self.channel.sent.clear()
        if answer.header["err"]:
            self.errors.append(answer.header["err"])
            return None
        return answer.header

    async def handshake(self, mechanism: str) -> bool:
        return await self._send(protocol.SASL_HANDSHAKE, sasl.encode_handshake_request(mechanism)) is not None

    async def authenticate(self, token: bytes) -> bytes | None:
        answer = await self._send(protocol.SASL_AUTHENTICATE, sasl.encode_authenticate_request(token))
        return None if answer is None else sasl.parse_authenticate_answer(answer).token


class KafkaFront:
    """The Kafka listener's SASL path: a request frame parsed as ``KafkaConnection``
    parses it, then :meth:`KafkaSasl.handle` (SaslHandshake v1, SaslAuthenticate v2, as
    librdkafka sends them)."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.closed = False
        self.channel = _Channel("10.0.0.9:5555", ANONYMOUS, self._close)
        self.sasl = KafkaSasl(authenticator, self.channel)
        self.errors: list[ErrorCode] = []
        self._ids = 0

    def _close(self) -> None:
        self.closed = True

    @property
    def session(self) -> ScramSession:
        return self.sasl.session

    @property
    def principal(self) -> Principal:
        return self.channel.principal  # type: ignore[no-any-return]

    async def _send(self, api: Api, version: int, **fields: Any) -> Any | None:
        """The answer, None when it carries an error (its code in ``errors``)."""
        self._ids += 1
        schema = load_request_schema(api, version)
        header = schema.__header_schema__(
            request_api_key=i16(api), request_api_version=i16(version), correlation_id=i32(self._ids), client_id="t"
        )
        frame = io.BytesIO()
        entity_writer(schema.__header_schema__)(frame, header)
        entity_writer(schema)(frame, schema(**fields))
        request = parse_kafka_request(frame.getvalue())
        assert isinstance(request, Request) and self.sasl.admits(request.api_key)
        raw, close = await self.sasl.handle(request)
        answer = decode_kafka_answer(api, version, raw)
        self.closed |= close  # the connection closes once the answer is written
        if answer.error_code != ErrorCode.none:
            self.errors.append(answer.error_code)
            return None
        return answer

    async def handshake(self, mechanism: str) -> bool:
        return await self._send(Api.SASL_HANDSHAKE, 1, mechanism=mechanism) is not None

    async def authenticate(self, token: bytes) -> bytes | None:
        answer = await self._send(Api.SASL_AUTHENTICATE, 2, auth_bytes=token)
        return None if answer is None else bytes(answer.auth_bytes)


async def _login(front: FrontEnd, user: str, password: str, mechanism: str) -> bool:
    """One SCRAM exchange with scramp's client through ``front``; True when the broker
    accepted the client's proof and proved that it knows the credentials too."""
    if not await front.handshake(mechanism):
        return False
    client = ScramClient([mechanism], user, password)
    server_first = await front.authenticate(client.get_client_first().encode())
    if server_first is None:
        return False
    client.set_server_first(server_first.decode())
    server_final = await front.authenticate(client.get_client_final().encode())
    if server_final is None:
        return False
    client.set_server_final(server_final.decode())  # raises if the broker's proof is wrong
    return True


def _both(
    monkeypatch: pytest.MonkeyPatch, run: Callable[[FrontEnd], Awaitable[bool]]
) -> tuple[NativeFront, KafkaFront, bool, bool, defaultdict[ScramSession, list[Step]], defaultdict[Any, int]]:
    """``run`` through a native and a Kafka connection, each on its own listener's
    authenticator; what each returned, the session calls and the failure counter."""
    calls = _spy_scram(monkeypatch)
    failures: defaultdict[Any, int] = defaultdict(int)
    native, kafka = NativeFront(_authenticator(failures)), KafkaFront(_authenticator(failures))

    async def go() -> tuple[bool, bool]:
        return await run(native), await run(kafka)

    native_ok, kafka_ok = asyncio.run(go())
    # each front end called its own connection's session, and no other code did
    assert set(calls) == {native.session, kafka.session}
    return native, kafka, native_ok, kafka_ok, calls, failures


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_kafka_and_a_native_scram_login_run_the_same_scram_session(
    monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    """A right password through either listener is one ScramSession exchange:
    ``handshake``, ``first``, ``final`` in that order with the client's mechanism, and
    both connections end as the principal the session yields, ``User:alice``."""
    native, kafka, native_ok, kafka_ok, calls, failures = _both(
        monkeypatch, lambda front: _login(front, "alice", PASSWORD, mechanism)
    )
    assert native_ok and kafka_ok
    expected = [Step("handshake", mechanism, None), Step("first", mechanism, None), Step("final", mechanism, None)]
    assert calls[native.session] == calls[kafka.session] == expected
    assert native.session.state == kafka.session.state == SaslState.DONE
    assert native.principal == kafka.principal == native.session.principal == Principal("User", "alice")
    assert native.auth.authenticated and kafka.sasl.authenticated
    assert not native.errors and not kafka.errors and not native.channel.closed and not kafka.closed
    assert not failures


@pytest.mark.parametrize("user, password", [("alice", "guess"), ("mallory", PASSWORD)])
def test_a_wrong_password_fails_in_the_same_scram_session_step_on_both_listeners(
    monkeypatch: pytest.MonkeyPatch, user: str, password: str
) -> None:
    """A wrong password (or an unknown user, who fails alike) fails the same way
    through either listener: the session's ``final`` raises AuthenticationError, which
    counts the failure once per connection in the counter both share; each front end
    only translates it into its own protocol's error and closes the connection."""
    mechanism = "SCRAM-SHA-256"
    native, kafka, native_ok, kafka_ok, calls, failures = _both(
        monkeypatch, lambda front: _login(front, user, password, mechanism)
    )
    assert not native_ok and not kafka_ok
    expected = [
        Step("handshake", mechanism, None),
        Step("first", mechanism, None),
        Step("final", mechanism, AuthenticationError),
    ]
    assert calls[native.session] == calls[kafka.session] == expected
    assert native.session.state == kafka.session.state == SaslState.FAILED
    assert native.principal == kafka.principal == ANONYMOUS
    assert not native.auth.authenticated and not kafka.sasl.authenticated
    # the one session error, in each protocol's words
    assert native.errors == [AuthenticationError.code] and native.channel.closed
    assert kafka.errors == [ErrorCode.sasl_authentication_failed] and kafka.closed
    assert failures == {(("mechanism", mechanism),): 2}
