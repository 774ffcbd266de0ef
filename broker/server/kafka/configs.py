"""DescribeConfigs (Kafka api 32, v1-v4) for topics and brokers, read-only.

Kafka tools ask it before they do much else (``kcat`` does not, but confluent-kafka's
``AdminClient.describe_configs``, kafka-python's admin and Kafka Connect do, and some
check ``cleanup.policy`` before they use a topic). The answer is built from what the
native admin serves: a topic's own settings (``logferry topic create/alter --config``,
stored in ZooKeeper and in every broker's cluster view) over the broker's ``[log]`` and
``[broker]`` settings, under Kafka's names:

=======================  ======================  =====================================
Kafka name               logferry setting        source when not the topic's own
=======================  ======================  =====================================
``retention.ms``         ``retention_ms``        ``log.retention.ms`` (``[log]``)
``retention.bytes``      ``retention_bytes``     ``log.retention.bytes``
``segment.bytes``        ``segment_bytes``       ``log.segment.bytes``
``segment.ms``           ``segment_ms``          ``log.roll.ms``
``min.insync.replicas``  ``min_insync_replicas`` ``min.insync.replicas`` (``[broker]``)
``compression.type``     ``compression``         ``producer`` (Kafka's name and default)
``cleanup.policy``       ``cleanup_policy``      ``delete``; ``compact``: never deleted by
                                                 retention (logferry never compacts)
``max.message.bytes``    —                       ``max_message_bytes`` (``[broker]``)
``flush.messages``/``ms`` —                      ``[log] flush_messages``/``flush_ms``
=======================  ======================  =====================================

Sources follow Kafka's numbers: DYNAMIC_TOPIC_CONFIG (1) for a topic's own setting,
STATIC_BROKER_CONFIG (4) for a broker setting that differs from logferry's default,
DEFAULT_CONFIG (5) otherwise. ``read_only`` is true for what no ``logferry topic alter``
changes. A broker resource must name the broker asked (Kafka's rule); its entries are
the broker's own settings under Kafka's broker names. Nothing secret is listed.

IncrementalAlterConfigs (Kafka api 44, v0-v1; ``kafka-configs --alter``, the Admin
clients' ``incrementalAlterConfigs``) changes a topic's own settings as ``logferry topic
alter`` does (the same admin path: ZooKeeper, every broker's watch): SET and DELETE of
the names with a logferry setting in the table above; a read-only name, an unknown one,
APPEND or SUBTRACT (no list settings here) get INVALID_CONFIG for their resource, and a
broker resource INVALID_REQUEST (broker settings are static: its config file). Nothing
of a refused resource is changed; ``validate_only`` checks and changes nothing. The
older AlterConfigs (33, replace all) is not served.

Authorization: ``describe`` on the topic (TOPIC_AUTHORIZATION_FAILED) or on the cluster
for a broker (CLUSTER_AUTHORIZATION_FAILED), as for Metadata; ``alter`` on the topic to
change it, as for ``logferry topic alter``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common import topic_config
from broker.common.acl import Operation
from broker.common.errors import (
    InvalidRequestError,
    InvalidTopicConfigError,
    LogferryError,
    UnknownTopicOrPartitionError,
)
from broker.common.principal import Principal
from broker.coordination.registry import ClusterView
from broker.server.config import BrokerConfig
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.protocol import Api, Request, make, response_schema
from broker.server.security.authorizer import Authorizer
from broker.storage.config import LogConfig

TOPIC, BROKER = 2, 4
"""Kafka's resource types (the rest, BROKER_LOGGER and so on, get INVALID_REQUEST)."""
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
"""Kafka's config sources."""
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
"""Kafka's config types (DescribeConfigs v3+)."""

_LOG_DEFAULTS = LogConfig()
_BROKER_DEFAULTS = BrokerConfig(broker_id=0, zk_connect="", log_dirs=())


@dataclass(frozen=True)
class ConfigEntry:
    """One config as DescribeConfigs lists it."""

    name: str
    value: str | None
    source: int
    read_only: bool
    type: int
    doc: str
    synonyms: tuple[tuple[str, str | None, int], ...] = ()
    """``(name, value, source)``: where the value comes from, most specific first."""


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _broker_source(value: Any, default: Any) -> int:
    return DEFAULT_CONFIG if value == default else STATIC_BROKER_CONFIG


# (Kafka topic name, logferry topic key or None, broker-level Kafka name, type, doc,
#  broker value, logferry default)
def _topic_table(config: BrokerConfig) -> list[tuple[str, str | None, str | None, int, str, Any, Any]]:
    log, d_log, d_broker = config.log, _LOG_DEFAULTS, _BROKER_DEFAULTS
    return [
        (
            "cleanup.policy",
            "cleanup_policy",
            None,
            LIST,
            "delete: whole segments past retention go; compact: never deleted by retention "
            "(logferry never compacts: every record is kept)",
            "delete",
            "delete",
        ),
        (
            "compression.type",
            "compression",
            None,
            STRING,
            "codec the leader stores uncompressed batches with (producer: as sent)",
            "producer",
            "producer",
        ),
        (
            "retention.ms",
            "retention_ms",
            "log.retention.ms",
            LONG,
            "delete segments not modified for longer",
            log.retention_ms,
            d_log.retention_ms,
        ),
        (
            "retention.bytes",
            "retention_bytes",
            "log.retention.bytes",
            LONG,
            "delete the oldest segments beyond this size (-1: unlimited)",
            log.retention_bytes,
            d_log.retention_bytes,
        ),
        (
            "segment.bytes",
            "segment_bytes",
            "log.segment.bytes",
            INT,
            "roll a new segment at this size",
            log.segment_bytes,
            d_log.segment_bytes,
        ),
        (
            "segment.ms",
            "segment_ms",
            "log.roll.ms",
            LONG,
            "roll a non-empty segment older than this",
            log.segment_ms,
            d_log.segment_ms,
        ),
        (
            "min.insync.replicas",
            "min_insync_replicas",
            "min.insync.replicas",
            INT,
            "in-sync replicas an acks=all produce needs",
            config.min_insync_replicas,
            d_broker.min_insync_replicas,
        ),
        (
            "max.message.bytes",
            None,
            "message.max.bytes",
            INT,
            "largest record batch a producer may append (max_message_bytes)",
            config.max_message_bytes,
            d_broker.max_message_bytes,
        ),
        (
            "flush.messages",
            None,
            "log.flush.interval.messages",
            LONG,
            "fsync after this many messages (broker-wide [log] flush_messages)",
            log.flush_messages,
            d_log.flush_messages,
        ),
        (
            "flush.ms",
            None,
            "log.flush.interval.ms",
            LONG,
            "fsync after this long (broker-wide [log] flush_ms)",
            log.flush_ms,
            d_log.flush_ms,
        ),
    ]


def topic_entries(config: BrokerConfig, overrides: Mapping[str, Any]) -> list[ConfigEntry]:
    """A topic's effective configs: its own settings over the broker's."""
    entries = []
    for name, key, broker_name, kind, doc, broker_value, default in _topic_table(config):
        synonyms: list[tuple[str, str | None, int]] = []
        fallback = _broker_source(broker_value, default)
        if key is not None and key in overrides:
            value, source = _text(overrides[key]), DYNAMIC_TOPIC_CONFIG
            synonyms.append((name, value, DYNAMIC_TOPIC_CONFIG))
        else:
            value, source = _text(broker_value), fallback
        if broker_name is not None:
            synonyms.append((broker_name, _text(broker_value), fallback))
        entries.append(ConfigEntry(name, value, source, key is None, kind, doc, tuple(synonyms)))
    return entries


def broker_entries(config: BrokerConfig) -> list[ConfigEntry]:
    """The broker's own settings under Kafka's broker names (none of them secret)."""
    log, d_log, d_broker = config.log, _LOG_DEFAULTS, _BROKER_DEFAULTS
    rows: list[tuple[str, Any, Any, int, str]] = [
        ("broker.id", config.broker_id, None, INT, "this broker's id"),
        ("broker.rack", config.rack or None, None, STRING, "its rack"),
        ("log.dirs", ",".join(map(str, config.log_dirs)), None, STRING, "its log directories"),
        ("num.partitions", config.num_partitions, d_broker.num_partitions, INT, "partitions of an auto-created topic"),
        (
            "default.replication.factor",
            config.default_replication_factor,
            d_broker.default_replication_factor,
            INT,
            "replicas of a new topic",
        ),
        (
            "min.insync.replicas",
            config.min_insync_replicas,
            d_broker.min_insync_replicas,
            INT,
            "in-sync replicas an acks=all produce needs",
        ),
        (
            "auto.create.topics.enable",
            config.auto_create_topics,
            d_broker.auto_create_topics,
            BOOLEAN,
            "create a topic on first use",
        ),
        (
            "unclean.leader.election.enable",
            config.unclean_leader_election,
            d_broker.unclean_leader_election,
            BOOLEAN,
            "elect an out-of-sync replica",
        ),
        (
            "message.max.bytes",
            config.max_message_bytes,
            d_broker.max_message_bytes,
            INT,
            "largest record batch a producer may append",
        ),
        (
            "socket.request.max.bytes",
            config.max_request_bytes,
            d_broker.max_request_bytes,
            INT,
            "largest request the broker reads; a larger one closes the connection",
        ),
        ("log.retention.ms", log.retention_ms, d_log.retention_ms, LONG, "delete segments not modified for longer"),
        (
            "log.retention.bytes",
            log.retention_bytes,
            d_log.retention_bytes,
            LONG,
            "delete the oldest segments beyond this size",
        ),
        ("log.segment.bytes", log.segment_bytes, d_log.segment_bytes, INT, "roll a new segment at this size"),
        ("log.roll.ms", log.segment_ms, d_log.segment_ms, LONG, "roll a non-empty segment older than this"),
        (
            "log.flush.interval.messages",
            log.flush_messages,
            d_log.flush_messages,
            LONG,
            "fsync after this many messages",
        ),
        ("log.flush.interval.ms", log.flush_ms, d_log.flush_ms, LONG, "fsync after this long"),
    ]
    return [
        ConfigEntry(
            name,
            None if value is None else _text(value),
            STATIC_BROKER_CONFIG if default is None else _broker_source(value, default),
            True,
            kind,
            doc,
        )
        for name, value, default, kind, doc in rows
    ]


SET, DELETE = 0, 1
"""IncrementalAlterConfigs' operations served (APPEND 2 and SUBTRACT 3 are for lists)."""

AlterTopic = Callable[[Principal, str, dict[str, Any], list[str]], Awaitable[dict[str, Any]]]
"""The admin's ``alter_topic_config(principal, topic, set, delete)``."""


def alterable_names(config: BrokerConfig) -> dict[str, str]:
    """Kafka topic config name -> logferry topic setting, for those a client may change."""
    return {name: key for name, key, *_ in _topic_table(config) if key is not None}


def logferry_key(config: BrokerConfig, name: str) -> str:
    """The logferry topic setting of Kafka's topic config ``name``; InvalidTopicConfigError
    (Kafka's INVALID_CONFIG) for a name logferry has no setting for, or a read-only one."""
    names = alterable_names(config)
    if name not in names:
        raise InvalidTopicConfigError(
            f"{name!r} cannot be set on logferry; these can: {', '.join(sorted(names))}", key=name
        )
    return names[name]


def logferry_topic_config(config: BrokerConfig, entries: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """A new topic's settings from Kafka's ``(name, value)`` configs (CreateTopics),
    under logferry's keys, unchecked (the registry checks them as for any create)."""
    return {logferry_key(config, name): value for name, value in entries}


class KafkaConfigs:
    """Answers DescribeConfigs from the cluster view and the broker's config, and
    IncrementalAlterConfigs through the admin's topic settings."""

    def __init__(
        self,
        config: BrokerConfig,
        view: Callable[[], ClusterView],
        authorizer: Authorizer,
        alter_topic: AlterTopic | None = None,
    ):
        self.config = config
        self.view = view
        self.authorizer = authorizer
        self.alter_topic = alter_topic

    async def incremental_alter_configs(self, request: Request, channel: Any) -> Any:
        """One response per resource: a topic's settings changed (or only checked, with
        ``validate_only``), or the error that left it unchanged."""
        v = request.version
        result_cls = response_schema(Api.INCREMENTAL_ALTER_CONFIGS, v, "AlterConfigsResourceResponse")
        results = []
        for resource in request.body.resources:
            error, message = ErrorCode.none, None
            try:
                await self._alter(channel.principal, resource, bool(request.body.validate_only))
            except LogferryError as exc:
                error, message = kafka_error(exc), str(exc)
            results.append(
                make(
                    result_cls,
                    error_code=error,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        return make(
            response_schema(Api.INCREMENTAL_ALTER_CONFIGS, v), throttle_time=timedelta(0), responses=tuple(results)
        )

    async def _alter(self, principal: Principal, resource: Any, validate_only: bool) -> None:
        if int(resource.resource_type) != TOPIC:
            raise InvalidRequestError(
                "only topic configs change here; a logferry broker's settings are its config file's "
                f"(resource type {int(resource.resource_type)})"
            )
        set_: dict[str, Any] = {}
        delete: list[str] = []
        for entry in resource.configs:
            key = logferry_key(self.config, entry.name)
            if int(entry.config_operation) == SET:
                set_[key] = entry.value
            elif int(entry.config_operation) == DELETE:
                delete.append(key)
            else:
                raise InvalidTopicConfigError(
                    f"{entry.name}: operation {int(entry.config_operation)} (APPEND/SUBTRACT) is for list "
                    "configs; logferry's topic settings are single values",
                    key=entry.name,
                )
        name = resource.resource_name
        if validate_only or self.alter_topic is None:
            self.authorizer.check_topic(principal, Operation.ALTER, name)
            if name not in self.view().topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            topic_config.altered(self.view().configs.get(name, {}), set_, delete)
            if self.alter_topic is None:
                raise InvalidRequestError("changing configs is not served by this listener")
            return
        await self.alter_topic(principal, name, set_, delete)

    async def describe_configs(self, request: Request, channel: Any) -> Any:
        """One result per resource asked for; the keys asked for, or all."""
        v = request.version
        body = request.body
        result_cls = response_schema(Api.DESCRIBE_CONFIGS, v, "DescribeConfigsResult")
        entry_cls = response_schema(Api.DESCRIBE_CONFIGS, v, "DescribeConfigsResourceResult")
        synonym_cls = response_schema(Api.DESCRIBE_CONFIGS, v, "DescribeConfigsSynonym")
        synonyms_on = getattr(body, "include_synonyms", False)
        docs_on = getattr(body, "include_documentation", False)
        results = []
        for resource in body.resources:
            error, message, entries = ErrorCode.none, None, []
            try:
                entries = self._entries(channel, int(resource.resource_type), resource.resource_name)
            except LogferryError as exc:
                error, message = kafka_error(exc), str(exc)
            keys = resource.configuration_keys
            if keys:
                entries = [e for e in entries if e.name in keys]
            results.append(
                make(
                    result_cls,
                    error_code=error,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=tuple(
                        make(
                            entry_cls,
                            name=e.name,
                            value=e.value,
                            read_only=e.read_only,
                            config_source=e.source,
                            is_default=e.source == DEFAULT_CONFIG,
                            is_sensitive=False,
                            config_type=e.type,
                            documentation=e.doc if docs_on else None,
                            synonyms=tuple(
                                make(synonym_cls, name=n, value=val, source=src) for n, val, src in e.synonyms
                            )
                            if synonyms_on
                            else (),
                        )
                        for e in entries
                    ),
                )
            )
        return make(response_schema(Api.DESCRIBE_CONFIGS, v), throttle_time=timedelta(0), results=tuple(results))

    def _entries(self, channel: Any, kind: int, name: str) -> list[ConfigEntry]:
        if kind == TOPIC:
            self.authorizer.check_topic(channel.principal, Operation.DESCRIBE, name)
            view = self.view()
            if name not in view.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            return topic_entries(self.config, view.configs.get(name, {}))
        if kind == BROKER:
            self.authorizer.check_cluster(channel.principal, Operation.DESCRIBE)
            if name == "":
                return []  # the cluster-wide dynamic defaults: logferry has none
            if name != str(self.config.broker_id):
                raise InvalidRequestError(
                    f"this is broker {self.config.broker_id}, not {name!r}: ask "
                    "the broker itself for its configs (as Kafka requires)"
                )
            return broker_entries(self.config)
        raise InvalidRequestError(f"resource type {kind} is not described here (topics: 2, brokers: 4)")


__all__ = [
    "ConfigEntry",
    "KafkaConfigs",
    "alterable_names",
    "broker_entries",
    "logferry_key",
    "logferry_topic_config",
    "topic_entries",
]
