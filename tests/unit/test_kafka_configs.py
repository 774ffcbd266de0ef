"""DescribeConfigs without sockets: a topic's own settings over the broker's under
Kafka's names and sources, broker resources, unknown topics, refusals and versions."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.common.acl import Operation, make_acl, topic
from broker.common.errors import InvalidTopicConfigError
from broker.common.principal import Principal
from broker.coordination.registry import ClusterView
from broker.server.config import BrokerConfig
from broker.server.kafka import protocol
from broker.server.kafka.configs import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    KafkaConfigs,
    broker_entries,
    logferry_topic_config,
    topic_entries,
)
from broker.server.kafka.protocol import Api
from broker.server.security.authorizer import Authorizer, AuthorizerConfig
from broker.storage.config import LogConfig

CONFIG = BrokerConfig(
    broker_id=3,
    zk_connect="zk:2181/x",
    log_dirs=(Path("/data/a"),),
    log=LogConfig(retention_ms=3_600_000),
    min_insync_replicas=2,
)


def by_name(entries: Any) -> dict[str, Any]:
    return {e.name: e for e in entries}


def test_a_topics_own_settings_win_over_the_brokers() -> None:
    entries = by_name(topic_entries(CONFIG, {"segment_bytes": 4096, "compression": "zstd"}))
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("4096", DYNAMIC_TOPIC_CONFIG)
    assert entries["segment.bytes"].synonyms == (
        ("segment.bytes", "4096", DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", str(1 << 30), DEFAULT_CONFIG),
    )
    assert entries["compression.type"].value == "zstd"
    # the broker's [log] retention_ms differs from logferry's default: a static broker config
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("3600000", STATIC_BROKER_CONFIG)
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == ("2", STATIC_BROKER_CONFIG)
    assert (entries["retention.bytes"].value, entries["retention.bytes"].source) == ("-1", DEFAULT_CONFIG)
    assert entries["cleanup.policy"].value == "delete" and not entries["cleanup.policy"].read_only
    assert not entries["retention.ms"].read_only  # `logferry topic alter` changes it
    assert entries["flush.ms"].read_only  # broker-wide here


def test_broker_entries_are_the_brokers_own_and_hold_no_secret() -> None:
    entries = by_name(broker_entries(CONFIG))
    assert entries["broker.id"].value == "3"
    assert entries["log.dirs"].value == "/data/a"
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["log.retention.ms"].source == STATIC_BROKER_CONFIG
    assert entries["num.partitions"].source == DEFAULT_CONFIG
    assert all(e.read_only for e in entries.values())
    assert not any("zk" in e.name or "zookeeper" in e.name or "password" in e.name for e in entries.values())


class Channel:
    def __init__(self, name: str = "alice") -> None:
        self.principal = Principal("User", name)


def ask(
    service: KafkaConfigs, version: int, resources: list[tuple[int, str, Any]], channel: Any = None, **flags: Any
) -> Any:
    schema = load_request_schema(Api.DESCRIBE_CONFIGS, version)
    resource_cls = __import__(schema.__module__, fromlist=["x"]).DescribeConfigsResource
    body = schema(
        resources=tuple(resource_cls(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources),
        **flags,
    )
    request = protocol.Request(Api.DESCRIBE_CONFIGS, version, 1, "t", body)
    answer = asyncio.run(service.describe_configs(request, channel or Channel()))
    protocol.encode_response(Api.DESCRIBE_CONFIGS, version, 1, answer)  # it encodes
    return answer


def service(authorizer: Authorizer | None = None) -> KafkaConfigs:
    view = ClusterView(topics={"logs": {0: [3]}, "plain": {0: [3]}}, configs={"logs": {"retention_ms": 60_000}})
    return KafkaConfigs(CONFIG, lambda: view, authorizer or Authorizer(AuthorizerConfig()))


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_version_answers_topics_and_brokers(version: int) -> None:
    flags = {"include_synonyms": True} if version >= 1 else {}
    if version >= 3:
        flags["include_documentation"] = True
    answer = ask(
        service(),
        version,
        [
            (2, "logs", None),
            (2, "plain", ("retention.ms",)),
            (4, "3", None),
            (2, "nope", None),
            (4, "9", None),
            (8, "3", None),
        ],
        **flags,
    )
    logs, plain, broker, nope, other, logger = answer.results
    assert logs.error_code == ErrorCode.none
    retention = next(c for c in logs.configs if c.name == "retention.ms")
    assert (retention.value, retention.config_source) == ("60000", DYNAMIC_TOPIC_CONFIG)
    assert [s.name for s in retention.synonyms] == ["retention.ms", "log.retention.ms"]
    if version >= 3:
        assert retention.documentation
    assert [(c.name, c.value) for c in plain.configs] == [("retention.ms", "3600000")]
    assert broker.error_code == ErrorCode.none and any(c.name == "broker.id" and c.value == "3" for c in broker.configs)
    assert nope.error_code == ErrorCode.unknown_topic_or_partition and not nope.configs
    assert other.error_code == ErrorCode.invalid_request and "broker 3" in other.error_message
    assert logger.error_code == ErrorCode.invalid_request


def test_synonyms_only_when_asked() -> None:
    answer = ask(service(), 4, [(2, "logs", ("retention.ms",))])
    assert answer.results[0].configs[0].synonyms == ()


def test_refusals_are_kafkas_authorization_codes() -> None:
    authorizer = Authorizer(AuthorizerConfig(enabled=True), 3, defaultdict(int))
    authorizer.set_acls([make_acl("User:alice", Operation.CONSUME, topic("logs"))])
    answer = ask(service(authorizer), 4, [(2, "logs", None), (2, "plain", None), (4, "3", None)])
    allowed, denied, broker = answer.results
    assert allowed.error_code == ErrorCode.none and allowed.configs
    assert denied.error_code == ErrorCode.topic_authorization_failed and not denied.configs
    assert broker.error_code == ErrorCode.cluster_authorization_failed


def test_describe_configs_is_advertised() -> None:
    assert protocol.SUPPORTED[Api.DESCRIBE_CONFIGS] == (1, 4)


def alter(
    configs: KafkaConfigs,
    version: int,
    resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
    **flags: Any,
) -> Any:
    schema = load_request_schema(Api.INCREMENTAL_ALTER_CONFIGS, version)
    module = __import__(schema.__module__, fromlist=["x"])
    body = schema(
        resources=tuple(
            module.AlterConfigsResource(
                resource_type=t,
                resource_name=n,
                configs=tuple(module.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in entries),
            )
            for t, n, entries in resources
        ),
        validate_only=flags.get("validate_only", False),
    )
    request = protocol.Request(Api.INCREMENTAL_ALTER_CONFIGS, version, 1, "t", body)
    answer = asyncio.run(configs.incremental_alter_configs(request, Channel()))
    protocol.encode_response(Api.INCREMENTAL_ALTER_CONFIGS, version, 1, answer)  # it encodes
    return answer


def altering_service() -> tuple[KafkaConfigs, list[tuple[str, dict[str, Any], list[str]]]]:
    """A KafkaConfigs whose admin records each change (topic, set, delete)."""
    done: list[tuple[str, dict[str, Any], list[str]]] = []

    async def alter_topic(principal: Principal, name: str, set_: dict[str, Any], delete: list[str]) -> dict[str, Any]:
        done.append((name, set_, delete))
        return set_

    view = ClusterView(topics={"logs": {0: [3]}}, configs={"logs": {"retention_ms": 60_000}})
    return KafkaConfigs(CONFIG, lambda: view, Authorizer(AuthorizerConfig()), alter_topic), done


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_sets_and_deletes_under_logferrys_names(version: int) -> None:
    configs, done = altering_service()
    answer = alter(configs, version, [(2, "logs", [("retention.ms", 0, "7200000"), ("compression.type", 1, None)])])
    assert [r.error_code for r in answer.responses] == [ErrorCode.none]
    assert done == [("logs", {"retention_ms": "7200000"}, ["compression"])]


def test_incremental_alter_configs_refuses_what_logferry_has_no_setting_for() -> None:
    configs, done = altering_service()
    answer = alter(
        configs,
        1,
        [
            (2, "logs", [("retention.ms", 0, "1000"), ("max.message.bytes", 0, "2000")]),  # read-only here
            (2, "logs", [("retention.ms", 2, "1000")]),  # APPEND: no list settings
            (4, "3", [("log.retention.ms", 0, "1000")]),  # broker settings are static
        ],
    )
    compact, append, broker = answer.responses
    assert compact.error_code == ErrorCode.invalid_config and "max.message.bytes" in compact.error_message
    assert append.error_code == ErrorCode.invalid_config
    assert broker.error_code == ErrorCode.invalid_request
    assert done == []  # nothing of a refused resource changes


def test_incremental_alter_configs_validate_only_checks_and_changes_nothing() -> None:
    configs, done = altering_service()
    answer = alter(
        configs,
        1,
        [(2, "logs", [("retention.ms", 0, "7200000")]), (2, "logs", [("segment.bytes", 0, "12")]), (2, "nope", [])],
        validate_only=True,
    )
    ok, small, unknown = answer.responses
    assert ok.error_code == ErrorCode.none
    assert small.error_code == ErrorCode.invalid_config  # below the smallest segment
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    assert done == []
    assert protocol.SUPPORTED[Api.INCREMENTAL_ALTER_CONFIGS] == (0, 1)


def test_a_new_topics_kafka_configs_become_logferry_settings() -> None:
    assert logferry_topic_config(
        CONFIG, [("retention.ms", "60000"), ("compression.type", "lz4"), ("cleanup.policy", "compact")]
    ) == {"retention_ms": "60000", "compression": "lz4", "cleanup_policy": "compact"}
    for name in ("max.message.bytes", "no.such.config"):
        with pytest.raises(InvalidTopicConfigError, match=name):
            logferry_topic_config(CONFIG, [(name, "x")])
