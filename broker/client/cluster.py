"""What every client shares: how to find brokers, which broker hosts which partition,
and one pooled connection per broker.

A cluster is bootstrapped from ZooKeeper (the live brokers registered under the
chroot) or from a static ``host:port`` list. Topic metadata then comes from any broker
(metadata api), which also lets brokers auto-create topics on first use.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError

from broker.client.connection import Connection
from broker.common.errors import (
    BrokerNotAvailableError,
    ConfigError,
    LeaderNotAvailableError,
    LogferryError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
    error_for_code,
)
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig, client_tls
from broker.coordination import zk
from broker.wire import protocol
from broker.wire.metadata import parse_metadata_answer

log = logging.getLogger("logferry.client")


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``("host", port)`` with an actionable error."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"broker address {address!r} must look like host:port")
    return host, int(port)


class Cluster:
    """Broker discovery, topic metadata and a connection per broker."""

    def __init__(
        self,
        zk_connect: str | None = None,
        brokers: Sequence[str] | None = None,
        request_timeout: float = 30.0,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
    ):
        """``tls``: TLS settings (or a ready client context) for every broker connection;
        ``None`` is plaintext. The context is built once here, so a bad file fails now.
        ``sasl``: credentials each connection authenticates with (None: none).
        ``listener``: the brokers' named listener to use (docs/security.md#listeners),
        found in their ZooKeeper registrations; None: the address registered as
        ``host``/``port`` (the default listener). With ``brokers`` the addresses given
        are the listener, and the brokers answer with the others on the same one."""
        if (zk_connect is None) == (brokers is None):
            raise ConfigError(
                "give exactly one of zk (a ZooKeeper connect string with chroot) or brokers (a list of host:port)"
            )
        self.request_timeout = request_timeout
        self._sasl = sasl
        self._ssl_context, self._server_hostname = client_tls(tls)
        self._zk_connect = zk_connect
        self.listener = listener
        self._zk = zk.connect(zk_connect, create=False) if zk_connect else None
        self._static = [parse_address(b) for b in brokers] if brokers else []
        self._lock = threading.RLock()
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, dict[int, int]] = {}
        self._connections: dict[tuple[str, int], Connection] = {}
        self._closed = False

    # -- metadata ---------------------------------------------------------------------

    def _bootstrap_addresses(self) -> list[tuple[str, int]]:
        if self._zk is None:
            return list(self._static) + list(self._brokers.values())
        addresses = []
        if not self._zk.connected:  # kazoo would queue the read until it reconnects
            known = list(self._brokers.values())
            if known:  # ZooKeeper only finds the brokers; those the last metadata named still serve
                return known
            raise ZooKeeperError(
                f"no connection to ZooKeeper at {self._zk_connect} (reconnecting); is ZooKeeper reachable?"
            )
        try:
            children = self._zk.get_children(zk.BROKER_IDS)
        except KazooException as exc:  # ZooKeeper away: retriable, as its error says
            raise ZooKeeperError(
                f"listing the brokers at {self._zk_connect}: {exc!r}; is ZooKeeper reachable?"
            ) from exc
        for child in children:
            try:
                raw, _ = self._zk.get(f"{zk.BROKER_IDS}/{child}")
            except Exception:
                continue
            data = zk.decode(raw)
            if self.listener is not None and self.listener != "default":
                address = zk.registered_listeners(data).get(self.listener)
                if address is not None:
                    addresses.append(address)
            elif data.get("host") and data.get("port"):
                addresses.append((str(data["host"]), int(data["port"])))
        if not addresses and self.listener not in (None, "default"):
            raise BrokerNotAvailableError(
                f"no broker registered in ZooKeeper at {self._zk_connect} has a listener "
                f"named {self.listener!r}; check the listener name against the brokers' "
                "[[listeners]]"
            )
        if not addresses:
            raise BrokerNotAvailableError(
                f"no broker is registered in ZooKeeper at {self._zk_connect}; start one "
                "with `logferry broker --config ...`"
            )
        return addresses

    def refresh(
        self,
        topics: Sequence[str] | None = None,
        create: bool = False,
        avoid: Iterable[tuple[str, int]] = (),
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Ask a broker for metadata of ``topics`` (all when None); returns its answer.

        ``avoid``: brokers not to ask (the producer's leader check skips those keeping
        its requests waiting); ``timeout``: seconds each broker gets, after which the
        next is asked (None: ``request_timeout``, and a broker that times out ends
        the refresh)."""
        skip = set(avoid)
        addresses = [a for a in self._bootstrap_addresses() if a not in skip]
        random.shuffle(addresses)
        last: LogferryError | None = None
        retriable = (BrokerNotAvailableError,) if timeout is None else (BrokerNotAvailableError, RequestTimedOutError)
        for address in addresses:
            try:
                frame = self.connection(address).call(
                    protocol.METADATA,
                    {"topics": list(topics) if topics is not None else None, "create": create},
                    self.request_timeout if timeout is None else timeout,
                )
            except retriable as exc:
                last = exc
                continue
            header = frame.header
            answer = parse_metadata_answer(header)
            with self._lock:
                self._brokers = {b: (a.host, a.port) for b, a in answer.brokers.items()}
                for topic, info in answer.topics.items():
                    if info.error:
                        self._topics.pop(topic, None)
                    else:
                        self._topics[topic] = dict(info.partitions)
            return header
        raise last or BrokerNotAvailableError(
            "no broker reachable" if not skip else f"no broker to ask but {sorted(skip)}, which were skipped"
        )

    def partitions_for(self, topic: str, create: bool = False) -> dict[int, int]:
        """Partition -> leader broker id (-1: none right now) for ``topic``, fetching
        metadata if not cached."""
        assignment = self._topics.get(topic)
        if assignment is not None:
            return assignment
        header = self.refresh([topic], create=create)
        info = header["topics"].get(topic, {})
        if info.get("err"):
            raise error_for_code(info["err"], info.get("msg", ""))
        return self._topics[topic]

    def cached_partitions(self, topic: str) -> dict[int, int]:
        """Partition -> leader of ``topic`` as of the last refresh ({} if not known)."""
        return dict(self._topics.get(topic, {}))

    def cached_leader_address(self, topic: str, partition: int) -> tuple[str, int] | None:
        """The address of the partition's leader as of the last refresh (None: not
        known, or no leader right now); no network."""
        broker_id = self._topics.get(topic, {}).get(partition, -1)
        return self._brokers.get(broker_id) if broker_id >= 0 else None

    def forget(self, topic: str) -> None:
        """Drop cached metadata of a topic (after a not-leader error, say)."""
        with self._lock:
            self._topics.pop(topic, None)

    def leader_address(self, topic: str, partition: int) -> tuple[str, int]:
        """Address of the broker leading a partition."""
        assignment = self.partitions_for(topic)
        if partition not in assignment:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0-{len(assignment) - 1}, not {partition}"
            )
        broker_id = assignment[partition]
        if broker_id < 0:  # election under way, or every in-sync replica is down
            self.forget(topic)
            raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader right now; retrying")
        address = self._brokers.get(broker_id)
        if address is None:
            self.refresh([topic])
            address = self._brokers.get(self._topics.get(topic, {}).get(partition, -1))
            if address is None:
                raise BrokerNotAvailableError(f"broker {broker_id} hosting {topic}-{partition} is not alive")
        return address

    def open_connection(self, topic: str, partition: int) -> Connection | None:
        """The open pooled connection to the partition's leader as cached now, or None
        if that needs the network (metadata, a connect) or the leader is unknown."""
        broker_id = self._topics.get(topic, {}).get(partition, -1)
        address = self._brokers.get(broker_id) if broker_id >= 0 else None
        conn = self._connections.get(address) if address is not None else None
        return conn if conn is not None and not conn.closed else None

    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        """Live brokers as of the last metadata refresh."""
        if not self._brokers:
            self.refresh([])
        return dict(self._brokers)

    def registrations(self) -> dict[int, dict[str, Any]]:
        """Every live broker's ZooKeeper registration (read-only), by id.

        Needs ZooKeeper (``zk``): a cluster reached through ``brokers`` raises
        :class:`ConfigError`."""
        if self._zk is None:
            raise ConfigError(
                "broker registrations are read from ZooKeeper: connect with zk= "
                "(a connect string with chroot), not brokers="
            )
        out: dict[int, dict[str, Any]] = {}
        try:
            for child in self._zk.get_children(zk.BROKER_IDS):
                try:
                    raw, _ = self._zk.get(f"{zk.BROKER_IDS}/{child}")
                    out[int(child)] = zk.decode(raw)
                except (NoNodeError, ValueError):
                    continue  # gone since listed, or not a broker's node
        except KazooException as exc:
            raise ZooKeeperError(
                f"reading the broker registrations at {self._zk_connect}: {exc!r}; is ZooKeeper reachable?"
            ) from exc
        return dict(sorted(out.items()))

    # -- connections ------------------------------------------------------------------

    def connection(self, address: tuple[str, int]) -> Connection:
        """The pooled connection to ``address``, reconnecting if it broke."""
        with self._lock:
            if self._closed:
                raise BrokerNotAvailableError("client is closed")
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
        conn = Connection(
            *address,
            connect_timeout=min(self.request_timeout, 10.0),
            ssl_context=self._ssl_context,
            server_hostname=self._server_hostname,
            sasl=self._sasl,
        )
        with self._lock:
            old = self._connections.get(address)
            if old is not None and not old.closed:
                conn.close()
                return old
            self._connections[address] = conn
        return conn

    def own_connection(self, address: tuple[str, int]) -> Connection:
        """A new connection to ``address`` for one caller (not pooled; the caller closes
        it), without a reader thread: the waiting thread reads its answers itself."""
        if self._closed:
            raise BrokerNotAvailableError("client is closed")
        return Connection(
            *address,
            connect_timeout=min(self.request_timeout, 10.0),
            ssl_context=self._ssl_context,
            server_hostname=self._server_hostname,
            sasl=self._sasl,
            reader_thread=False,
        )

    def call_any(self, api: int, fields: dict[str, Any]) -> protocol.Frame:
        """Send a request to any reachable broker (admin apis)."""
        last: LogferryError | None = None
        addresses = self._bootstrap_addresses()
        random.shuffle(addresses)
        for address in addresses:
            try:
                return self.connection(address).call(api, fields, self.request_timeout)
            except BrokerNotAvailableError as exc:
                last = exc
        raise last or BrokerNotAvailableError("no broker reachable")

    def close(self) -> None:
        """Close every connection and the ZooKeeper session."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, {}
        for conn in connections.values():
            conn.close()
        if self._zk is not None:
            zk.close(self._zk)
            self._zk = None
