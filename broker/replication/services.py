"""What replication needs from the process it runs in, and nothing more.

The :class:`~broker.replication.manager.ReplicaManager` used to receive the whole
broker and reach into its private fields; now the server builds one
:class:`ReplicationServices` and hands it over. Everything here is either a shared
resource (the ZooKeeper client, the registry, the logs, the thread pools), the part
of the configuration replication reads, or a hook back into the server (wake long
polls, count bytes and metrics). Replication imports nothing from ``broker.server``:
the layers point one way (replication <- server).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from broker.common.background import BackgroundTasks
from broker.common.sasl import SaslCredentials

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordination.registry import BrokerRegistry
    from broker.storage.partition_log import PartitionLog

PartitionKey = tuple[str, int]


class ReplicationConfig(Protocol):
    """The settings replication reads (a :class:`broker.server.config.BrokerConfig`
    has them all)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def min_insync_replicas(self) -> int: ...

    @property
    def acks_all_timeout_ms(self) -> int: ...

    @property
    def replica_lag_time_max_ms(self) -> int: ...

    @property
    def replica_fetch_wait_max_ms(self) -> int: ...

    @property
    def replica_fetch_max_bytes(self) -> int: ...

    @property
    def zk_session_timeout_s(self) -> float: ...


class LogSource(Protocol):
    """Where a hosted partition's log is found (the server's log manager)."""

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...


@dataclass
class ReplicationServices:
    """The narrow interface between replication and the broker process.

    ``zk`` and ``registry`` exist only once the server has connected to ZooKeeper:
    they are None until :meth:`ReplicaManager.start` receives them.
    """

    config: ReplicationConfig
    logs: LogSource
    admin_pool: Executor
    """ZooKeeper calls (reads and writes of partition states) run here, off the loop."""
    fsync_pool: Executor
    """Disk work (the high-watermark checkpoint), never queued behind ZooKeeper."""
    isr_changes: MutableMapping[Any, float]
    """Counter of ISR changes written as leader, labelled by direction."""
    truncated_bytes: MutableMapping[Any, float]
    """Counter of bytes a returning follower cut because its leader lacked them."""
    wake_consumers: Callable[[PartitionKey], None]
    """The visible end of a partition moved: answer consumers' long polls."""
    wake_fetchers: Callable[[PartitionKey], None]
    """A partition changed role: answer followers' long polls."""
    replicated_in: Callable[[PartitionKey, int, int], None]
    """A follower appended (bytes, messages) copied from its leader."""
    zk: KazooClient | None = None
    registry: BrokerRegistry | None = None
    leader_ssl_context: ssl.SSLContext | None = None
    """TLS toward leaders (the broker's ``[tls]`` section as a client; None: plaintext)."""
    leader_server_hostname: str | None = None
    """The name a leader's certificate is checked against (None: the address dialled)."""
    leader_sasl: SaslCredentials | None = None
    """This broker's SASL credentials toward leaders (the broker's ``[sasl]``; None: none)."""
    leader_listener: str = "default"
    background: BackgroundTasks = field(default_factory=BackgroundTasks)
    """Where replication's long-lived tasks run (the broker's: a crash stops it)."""
    """The listener of the leaders followers fetch on (``[broker] inter_broker_listener``)."""


__all__ = ["LogSource", "PartitionKey", "ReplicationConfig", "ReplicationServices"]
