"""The broker's authorizer driven through the request handlers, without sockets: the
principal is set on the test's channel (the only way a principal is set without
authentication, and it exists only here). Real partition logs in a temporary
directory; replication is a stand-in leading every partition alone."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from broker.common.acl import CLUSTER, Operation, Resource, ResourceType, make_acl, topic
from broker.common.errors import (
    ClusterAuthorizationFailedError,
    ConfigError,
    TopicAuthorizationFailedError,
    error_for_code,
)
from broker.common.metrics import Metrics
from broker.common.principal import ANONYMOUS, Principal
from broker.coordination.partition_state import PartitionState
from broker.coordination.registry import ClusterView
from broker.server.broker_metrics import BrokerMetrics
from broker.server.config import BrokerConfig, broker_config_from_dict
from broker.server.durability.flusher import Flusher
from broker.server.native.dispatch import Dispatcher
from broker.server.security.authorizer import Authorizer, AuthorizerConfig
from broker.server.services.admin import AdminService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.responder import Responder
from broker.server.services.routing import PartitionRouter
from broker.storage.config import LogConfig
from broker.storage.log_manager import LogManager
from broker.wire import records
from broker.wire.fetch import FetchPart, FetchRequest, ReplicaFetchPart, parse_fetch_answer
from broker.wire.metadata import MetadataRequest, parse_metadata_answer
from broker.wire.offsets import OffsetsRequest
from broker.wire.produce import ProduceRequest, parse_produce_answer
from broker.wire.topics import CreateTopicRequest, DeleteTopicRequest, ElectLeadersRequest
from tests.unit.test_server_handlers import Channel

MIRROR = Principal("User", "mirror")


class Setup:
    def __init__(self, tmp_path, acls, super_users=()):
        self.logs = LogManager([tmp_path], LogConfig(flush_messages=10_000, flush_ms=60_000, group_commit=False))
        self.logs.load()
        for name in ("web-a", "secret"):
            self.logs.create(name, 0)
        view = ClusterView(
            topics={"web-a": {0: [1]}, "secret": {0: [1]}},
            states={(t, 0): PartitionState(leader=1, leader_epoch=1, isr=(1,)) for t in ("web-a", "secret")},
        )
        replication = SimpleNamespace(
            leader_log=lambda topic, partition, for_write=False, acks_all=False: self.logs.get(topic, partition),
            check_acks_all=lambda topic, partition: None,
            wait_for_replicas=lambda *args: False,
            on_publishable=lambda key: None,
            role_counts=lambda: {},
            under_replicated=lambda: [],
            replicas={},
        )
        self.metrics = BrokerMetrics(Metrics(), self.logs, set(), lambda: replication, lambda: None)
        self.authorizer = Authorizer(AuthorizerConfig(True, tuple(super_users)), 7, self.metrics.authorization_denied)
        self.authorizer.set_acls(acls)
        router = PartitionRouter(1, replication, lambda: view)
        self.fetch = FetchService(router, replication, self.logs, self.metrics, lambda: False, self.authorizer)
        self.pool = ThreadPoolExecutor(1)
        flusher = Flusher(self.logs, 60_000, self.pool, self.fetch.wake_consumers, replication.on_publishable)
        self.produce = ProduceService(
            router,
            replication,
            self.logs,
            flusher,
            self.fetch,
            self.metrics,
            False,
            lambda: False,
            authorizer=self.authorizer,
        )
        config = SimpleNamespace(
            auto_create_topics=True,
            num_partitions=1,
            broker_id=7,
            default_replication_factor=1,
            max_message_bytes=BrokerConfig.max_message_bytes,
        )
        self.admin = AdminService(
            config,
            router,
            lambda: view,
            lambda: None,
            lambda: None,  # type: ignore[arg-type]
            self.pool,
            lambda: False,
            self.authorizer,
        )
        self.native = Dispatcher(self.produce, self.fetch, self.admin)

    def close(self):
        self.pool.shutdown()
        self.logs.close()

    def denied(self, operation: str, kind: str) -> float:
        return self.metrics.authorization_denied[(("operation", operation), ("resource_type", kind))]


def _responder(principal: Principal) -> tuple[Channel, Responder]:
    channel = Channel()
    channel.principal = principal  # type: ignore[misc]
    return channel, Responder(channel, 1, "test", lambda *a: None)


def _answer(channel: Channel):
    (frame,) = channel.frames()
    return frame


@pytest.fixture
def setup(tmp_path):
    made = []

    def make(acls, super_users=()):
        made.append(Setup(tmp_path / str(len(made)), acls, super_users))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_produce_needs_produce_on_the_topic_and_a_refusal_appends_nothing(setup) -> None:
    s = setup([make_acl("User:mirror", "produce", Resource(ResourceType.TOPIC_PREFIX, "web-"))])
    batch = records.encode_batch([b"m"], None, 1)
    channel, responder = _responder(MIRROR)
    s.native.run_produce(ProduceRequest(1, [("web-a", 0, batch), ("secret", 0, batch)], None), responder)
    ok, refused = parse_produce_answer(_answer(channel).header)
    assert (ok.error, ok.base_offset) == (0, 0)
    assert refused.error == TopicAuthorizationFailedError.code
    assert refused.message.startswith("User:mirror may not produce on topic 'secret' (broker 7: no ACL allows it")
    assert isinstance(error_for_code(refused.error, refused.message), TopicAuthorizationFailedError)
    assert not error_for_code(refused.error).retriable
    assert s.logs.get("secret", 0).end_offset == 0
    assert s.denied("produce", "topic") == 1
    # the same principal may consume nothing: produce does not imply consume
    channel, responder = _responder(MIRROR)
    asyncio.run(s.native.handle_fetch(FetchRequest([FetchPart("web-a", 0, 0, 1000)], 0, 1, None), responder))
    (part,) = parse_fetch_answer(_answer(channel).header)
    assert part.error == TopicAuthorizationFailedError.code and "may not consume" in part.message


def test_fetch_needs_consume_per_part_and_answers_a_refusal_at_once(setup) -> None:
    s = setup([make_acl("*", "consume", topic("*")), make_acl("*", "consume", topic("secret"), allow=False)])
    channel, responder = _responder(ANONYMOUS)
    request = FetchRequest(
        [FetchPart("web-a", 0, 0, 1000), FetchPart("secret", 0, 0, 1000)], max_wait_ms=30_000, min_bytes=1, replica=None
    )
    asyncio.run(asyncio.wait_for(s.native.handle_fetch(request, responder), 5))  # no long poll
    allowed, refused = parse_fetch_answer(_answer(channel).header)
    assert allowed.error == 0
    assert refused.error == TopicAuthorizationFailedError.code
    assert "User:ANONYMOUS may not consume on topic 'secret'" in refused.message
    assert "denied by ACL 'deny * consume on topic 'secret''" in refused.message
    assert s.denied("consume", "topic") == 1


def test_a_follower_fetch_needs_alter_on_the_cluster(setup) -> None:
    s = setup([make_acl("*", "consume", topic("*"))], super_users=["User:broker"])
    request = FetchRequest([ReplicaFetchPart("web-a", 0, 0, 1000, 1)], 0, 1, replica=2)
    with pytest.raises(ClusterAuthorizationFailedError, match="User:ANONYMOUS may not alter on cluster"):
        asyncio.run(s.native.handle_fetch(request, _responder(ANONYMOUS)[1]))
    assert s.denied("alter", "cluster") == 1
    s.authorizer.set_acls([make_acl("User:replicator", "alter", CLUSTER)])
    for principal in (Principal("User", "broker"), Principal("User", "replicator")):
        s.fetch.replication.check_replica_fetch = lambda *a: (_ for _ in ()).throw(
            TopicAuthorizationFailedError("reached the replica reader")
        )
        channel, responder = _responder(principal)
        asyncio.run(s.native.handle_fetch(request, responder))
        (part,) = parse_fetch_answer(_answer(channel).header, replica=True)
        assert "reached the replica reader" in part.message


def test_metadata_lists_only_describable_topics_and_refuses_named_ones(setup) -> None:
    s = setup([make_acl("User:mirror", "consume", Resource(ResourceType.TOPIC_PREFIX, "web-"))])
    channel, responder = _responder(MIRROR)
    asyncio.run(s.native.handle_metadata(MetadataRequest(None, False), responder))
    assert sorted(parse_metadata_answer(_answer(channel).header).topics) == ["web-a"]
    assert s.denied("describe", "topic") == 0  # listing hides, it does not count denials
    channel, responder = _responder(MIRROR)
    asyncio.run(s.native.handle_metadata(MetadataRequest(["secret", "nosuch", "web-new"], True), responder))
    topics = parse_metadata_answer(_answer(channel).header).topics
    # refused before existence is looked at: "nosuch" is not told apart from "secret"
    assert topics["secret"].error == topics["nosuch"].error == TopicAuthorizationFailedError.code
    assert "may not describe on topic 'nosuch'" in topics["nosuch"].message
    # describable but not creatable: the auto-create is refused with create named
    assert topics["web-new"].error == TopicAuthorizationFailedError.code
    assert "may not create on topic 'web-new'" in topics["web-new"].message


@pytest.mark.parametrize(
    "call, request_, operation, kind",
    [
        ("offsets", OffsetsRequest("secret", 0, "latest"), "describe", "topic"),
        ("create_topic", CreateTopicRequest("secret2", 1, 1, None), "create", "topic"),
        ("delete_topic", DeleteTopicRequest("secret"), "delete", "topic"),
        ("elect_leaders", ElectLeadersRequest(), "alter", "cluster"),
    ],
)
def test_admin_apis_need_their_operation(setup, call, request_, operation, kind) -> None:
    s = setup([make_acl("User:mirror", "produce", topic("web-a"))])
    with pytest.raises(
        (TopicAuthorizationFailedError, ClusterAuthorizationFailedError),
        match=f"User:mirror may not {operation} on {kind}",
    ):
        asyncio.run(getattr(s.admin, call)(request_, _responder(MIRROR)[1]))
    assert s.denied(operation, kind) == 1


def test_offsets_allowed_by_consume_and_everything_by_a_superuser(setup) -> None:
    s = setup([make_acl("User:mirror", "consume", topic("secret"))], super_users=["User:admin"])
    for principal in (MIRROR, Principal("User", "admin")):
        channel, responder = _responder(principal)
        asyncio.run(s.admin.offsets(OffsetsRequest("secret", 0, "latest"), responder))
        assert not _answer(channel).header.get("err")
    assert s.denied("describe", "topic") == 0


def test_acl_changes_apply_to_the_next_request(setup) -> None:
    s = setup([])
    batch = records.encode_batch([b"m"], None, 1)
    results = []
    for acls in ([], [make_acl("*", "produce", topic("web-a"))], []):
        s.authorizer.set_acls(acls)
        channel, responder = _responder(ANONYMOUS)
        s.native.run_produce(ProduceRequest(1, [("web-a", 0, batch)], None), responder)
        results.append(parse_produce_answer(_answer(channel).header)[0].error)
    assert results == [TopicAuthorizationFailedError.code, 0, TopicAuthorizationFailedError.code]


def test_denials_are_logged_at_a_bounded_rate_and_all_counted(caplog) -> None:
    now = [0.0]
    authorizer = Authorizer(AuthorizerConfig(True), 1, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "logferry.broker")
    for _ in range(100):
        with pytest.raises(TopicAuthorizationFailedError):
            authorizer.check_topic(ANONYMOUS, Operation.PRODUCE, "t")
    now[0] = 11.0
    with pytest.raises(TopicAuthorizationFailedError):
        authorizer.check_topic(ANONYMOUS, Operation.PRODUCE, "t")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0] == ("authorizer: denied User:ANONYMOUS produce on topic 't': no ACL allows it")
    assert lines[1].endswith("(99 more denials of it since the last report)")
    assert authorizer.denied[(("operation", "produce"), ("resource_type", "topic"))] == 101


def test_off_allows_everything_without_looking_at_acls() -> None:
    authorizer = Authorizer(AuthorizerConfig(False))
    authorizer.set_acls([make_acl("*", "produce", topic("*"), allow=False)])
    authorizer.check_topic(ANONYMOUS, Operation.PRODUCE, "t")
    authorizer.check_cluster(ANONYMOUS, Operation.ALTER)
    assert authorizer.allowed(ANONYMOUS, Operation.DESCRIBE, topic("t"))


def test_the_authorizer_table_of_the_broker_config() -> None:
    base = {"broker": {"id": 1, "zk_connect": "127.0.0.1:2181/x", "log_dirs": ["/tmp/d"]}}
    assert broker_config_from_dict(base).authorizer == AuthorizerConfig(False, ())
    config = broker_config_from_dict({**base, "authorizer": {"enabled": True, "super_users": ["User:admin"]}})
    assert config.authorizer == AuthorizerConfig(True, ("User:admin",))
    for table, message in (
        ({"super_users": ["admin"]}, r"super_users\[0\]: a principal is written"),
        ({"super_users": ["Group:x"]}, "principals are 'User:<name>'"),
        ({"enable": True}, "did you mean 'enabled'"),
        ({"enabled": "yes"}, "must be true or false"),
    ):
        with pytest.raises(ConfigError, match=message):
            broker_config_from_dict({**base, "authorizer": table})
