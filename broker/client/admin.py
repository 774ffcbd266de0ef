"""Topic administration through any broker of the cluster."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from broker.client.cluster import Cluster
from broker.common import topic_config
from broker.common.errors import error_for_code
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.coordination import zk
from broker.wire import protocol
from broker.wire.metadata import parse_metadata_answer
from broker.wire.topics import parse_alter_topic_answer, parse_create_partitions_answer


class BrokerInfo(NamedTuple):
    """How to reach a live broker."""

    host: str
    port: int
    datacenter: str
    rack: str = ""


class PartitionInfo(NamedTuple):
    """Who holds one partition: its leader (-1: none right now), replicas, in-sync ones."""

    leader: int
    replicas: list[int]
    isr: list[int]
    leader_epoch: int = -1

    @property
    def under_replicated(self) -> bool:
        """True while some replica is out of sync (or the partition has no leader)."""
        return self.leader < 0 or len(self.isr) < len(self.replicas)


class ListenerInfo(NamedTuple):
    """One listener of a broker as its ZooKeeper registration names it."""

    name: str
    protocol: str
    """``logferry`` or ``kafka``."""
    host: str
    port: int
    security: str
    """``plaintext``, ``TLS``, ``TLS, SASL required``...; ``""`` when the broker did not
    register it (an older one)."""


class ClusterState(NamedTuple):
    """One metadata reading of a whole cluster (:meth:`Admin.describe_cluster`)."""

    brokers: dict[int, BrokerInfo]
    """Live brokers by id."""
    controller: int
    """The controller's broker id (-1: none right now)."""
    topics: dict[str, dict[int, PartitionInfo]]
    """Every topic's partitions."""
    configs: dict[str, dict[str, Any]]
    """Every topic's settings recorded at creation (may be empty)."""


class Admin:
    """Create, delete, list and describe topics; list brokers; elect preferred leaders."""

    def __init__(
        self,
        zk: str | None = None,
        brokers: Sequence[str] | None = None,
        request_timeout: float = 30.0,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
    ):
        """``tls``: TLS settings or a client context for the broker connections;
        ``sasl``: credentials to authenticate them with."""
        self.cluster = Cluster(zk, brokers, request_timeout, tls, sasl, listener)

    def create_topic(
        self,
        name: str,
        partitions: int = 0,
        replication_factor: int = 0,
        min_insync_replicas: int = 0,
        config: Mapping[str, Any] | None = None,
    ) -> dict[int, list[int]]:
        """Create ``name``; returns each partition's replicas (the first leads).

        0 for ``partitions`` or ``replication_factor`` takes the broker's default; 0
        for ``min_insync_replicas`` takes the broker's ``min_insync_replicas``.
        ``config``: per-topic settings (:mod:`broker.common.topic_config`), checked here
        first (InvalidTopicConfigError naming the key) and again by the broker.
        """
        checked = topic_config.validate(config or {})
        frame = self.cluster.call_any(
            protocol.CREATE_TOPIC,
            {
                "topic": name,
                "partitions": partitions,
                "replication_factor": replication_factor,
                "min_insync_replicas": min_insync_replicas,
                "config": checked,
            },
        )
        return {int(p): [int(b) for b in r] for p, r in frame.header["partitions"].items()}

    def alter_topic(
        self, name: str, settings: Mapping[str, Any] | None = None, delete: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Set and remove ``name``'s per-topic settings (removed ones fall back to the
        brokers' own); returns the settings now in force. Brokers apply them without a
        restart, within a moment (their ZooKeeper watch)."""
        checked = topic_config.validate(settings or {})
        for key in delete:
            topic_config.check_key(key)
        frame = self.cluster.call_any(protocol.ALTER_TOPIC, {"topic": name, "set": checked, "delete": list(delete)})
        return parse_alter_topic_answer(frame.header).config

    def create_partitions(self, name: str, partitions: int) -> dict[int, list[int]]:
        """Grow ``name`` to ``partitions`` partitions (the new total; never fewer:
        InvalidPartitionsError); returns the whole assignment. Keyed messages map to
        partitions by ``hash(key) % count``, so most keys move to another partition
        from then on (docs/operations.md)."""
        frame = self.cluster.call_any(protocol.CREATE_PARTITIONS, {"topic": name, "partitions": partitions})
        self.cluster.forget(name)
        return parse_create_partitions_answer(frame.header).partitions

    def topic_config(self, name: str) -> dict[str, Any]:
        """``name``'s per-topic settings (overrides of the brokers' own; {} for none)."""
        answer = parse_metadata_answer(self.cluster.refresh([name]))
        info = answer.topics.get(name)
        if info is None or info.error:
            raise error_for_code(info.error if info else 6, (info.message if info else "") or f"unknown topic {name!r}")
        return dict(info.config)

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and its data on every broker."""
        self.cluster.call_any(protocol.DELETE_TOPIC, {"topic": name})
        self.cluster.forget(name)

    def list_topics(self) -> list[str]:
        """Names of every topic."""
        return sorted(self.cluster.refresh(None)["topics"])

    def describe_topic(self, name: str) -> dict[int, int]:
        """Partition -> leader broker id (-1 while it has none)."""
        self.cluster.forget(name)
        return dict(sorted(self.cluster.partitions_for(name).items()))

    def describe_partitions(self, name: str) -> dict[int, PartitionInfo]:
        """Partition -> leader, replicas and ISR."""
        return self.describe_all([name])[name]

    def describe_all(self, names: Sequence[str] | None = None) -> dict[str, dict[int, PartitionInfo]]:
        """Every topic (or ``names``) -> partition -> leader, replicas and ISR."""
        answer = parse_metadata_answer(self.cluster.refresh(list(names) if names is not None else None))
        out: dict[str, dict[int, PartitionInfo]] = {}
        for topic, info in sorted(answer.topics.items()):
            if info.error:
                raise error_for_code(info.error, info.message or "")
            out[topic] = {
                p: PartitionInfo(leader, info.replicas[p], info.isr[p], info.epochs.get(p, -1))
                for p, leader in sorted(info.partitions.items())
            }
        return out

    def under_replicated(self) -> dict[str, dict[int, PartitionInfo]]:
        """Partitions with a replica out of sync or no leader, by topic."""
        found: dict[str, dict[int, PartitionInfo]] = {}
        for topic, parts in self.describe_all().items():
            bad = {p: i for p, i in parts.items() if i.under_replicated}
            if bad:
                found[topic] = bad
        return found

    def elect_preferred_leaders(self) -> int:
        """Ask the controller to hand leadership back to each partition's first replica
        (where it is alive and in sync); returns the controller's broker id."""
        frame = self.cluster.call_any(protocol.ELECT_LEADERS, {})
        return int(frame.header.get("controller", -1))

    def auto_create_topics(self) -> bool | None:
        """Whether a broker creates unknown topics on a producer's first send (its
        ``auto_create_topics``); None when it does not say (an older broker)."""
        return parse_metadata_answer(self.cluster.refresh([])).auto_create

    def describe_cluster(self) -> ClusterState:
        """Brokers, controller and every topic's partitions from one metadata request
        (what a dashboard polls)."""
        answer = parse_metadata_answer(self.cluster.refresh(None))
        topics: dict[str, dict[int, PartitionInfo]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for topic, info in sorted(answer.topics.items()):
            if info.error:
                continue
            topics[topic] = {
                p: PartitionInfo(leader, info.replicas[p], info.isr[p], info.epochs.get(p, -1))
                for p, leader in sorted(info.partitions.items())
            }
            configs[topic] = dict(info.config or {})
        brokers = {b: BrokerInfo(a.host, a.port, a.datacenter, a.rack) for b, a in sorted(answer.brokers.items())}
        return ClusterState(brokers, answer.controller, topics, configs)

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers by id."""
        answer = parse_metadata_answer(self.cluster.refresh([]))
        return {b: BrokerInfo(a.host, a.port, a.datacenter, a.rack) for b, a in sorted(answer.brokers.items())}

    def listeners(self) -> dict[int, list[ListenerInfo]]:
        """Every live broker's listeners, from the brokers' registrations in ZooKeeper
        (read-only; needs ``zk``)."""
        return {
            b: [ListenerInfo(*e) for e in zk.registered_endpoints(data)]
            for b, data in self.cluster.registrations().items()
        }

    def close(self) -> None:
        """Close connections and the ZooKeeper session."""
        self.cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
