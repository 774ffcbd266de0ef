"""The Kafka front end as the broker builds it: one call, one object.

The broker knows Kafka only through this module: for a ``[kafka]`` listener it calls
:func:`build` with the services it already made, binds the listener through
:class:`~broker.server.listening.Listening` with :meth:`KafkaFrontEnd.connection_factory`,
and runs :meth:`KafkaFrontEnd.background`'s tasks. Its libraries (kio, crc32c,
cramjam) are the ``kafka`` extra, so the broker imports this module only when a
Kafka listener is configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from broker.coordination.registry import ClusterView
from broker.server.config import BrokerConfig
from broker.server.kafka.connection import KafkaConnection
from broker.server.kafka.group_service import KafkaGroupService
from broker.server.kafka.service import KafkaService
from broker.server.kafka.txn_markers import TxnMarkerWriter
from broker.server.kafka.txn_service import KafkaTxnService
from broker.server.kafka.txn_store import TxnStateLog
from broker.server.security.authentication import Authenticator
from broker.server.services.admin import AdminService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.responder import CountRequest
from broker.server.services.routing import PartitionRouter
from broker.storage.log_manager import LogManager


@dataclass
class KafkaFrontEnd:
    """The Kafka listener's service, group coordinator and open connections."""

    service: KafkaService
    groups: KafkaGroupService
    txns: KafkaTxnService
    max_request_bytes: int
    auth_timeout_s: float
    """An unauthenticated connection is closed after this long where SASL is required."""
    connections: set[KafkaConnection] = field(default_factory=set)

    def connection_factory(self, authenticator: Authenticator | None) -> Callable[[], asyncio.BaseProtocol]:
        """What the listener makes for each accepted connection."""
        return lambda: KafkaConnection(
            self.service, self.max_request_bytes, self.connections, authenticator, self.auth_timeout_s
        )

    def background(self) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
        """The long-lived tasks the broker runs for this front end: name -> coroutine
        function."""
        return {"kafka-group-expiry": self.groups.run_expiry, "kafka-txn-expiry": self.txns.run_expiry}


def build(
    config: BrokerConfig,
    router: PartitionRouter,
    produce: ProduceService,
    fetch: FetchService,
    admin: AdminService,
    view: Callable[[], ClusterView],
    logs: LogManager,
    zk_client: Callable[[], Any],
    admin_pool: Executor,
    count_request: CountRequest,
) -> KafkaFrontEnd:
    """The Kafka front end over the broker's services."""
    groups = KafkaGroupService(config.broker_id, view, logs, zk_client, admin_pool, admin.authorizer)

    async def producer_id() -> int:
        return (await admin.init_producer_id()).producer_id

    markers = TxnMarkerWriter(config.broker_id, view, produce, router.replication.services)
    state_log = TxnStateLog(
        config.broker_id,
        view,
        lambda: router.replication.replicas,
        produce,
        admin.create_in_zk,
        zk_client,
        admin_pool,
        partitions=config.transaction_state_partitions,
        replication_factor=config.transaction_state_replication_factor,
        min_insync=config.transaction_state_min_insync_replicas,
        snapshot_bytes=config.transaction_state_snapshot_bytes,
    )
    txns = KafkaTxnService(
        config.broker_id,
        view,
        zk_client,
        admin_pool,
        producer_id,
        markers,
        groups,
        admin.authorizer,
        expiration_ms=config.transactional_id_expiration_ms,
        state_log=state_log,
    )
    groups.txn_coordinator = txns.find_coordinator
    service = KafkaService(config, router, produce, fetch, admin, view, count_request, groups, txns)
    return KafkaFrontEnd(service, groups, txns, config.max_request_bytes, config.incomplete_request_timeout_ms / 1000)


__all__ = ["KafkaFrontEnd", "build"]
