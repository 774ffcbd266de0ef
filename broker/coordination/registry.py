"""The broker's side of the ZooKeeper registries: who is alive, which topics exist,
who leads each partition.

The broker registers itself as an ephemeral ``/brokers/ids/<id>`` and watches the
broker and topic registries, every partition's state (leader, epoch, ISR) and the
controller node; every change yields a fresh :class:`ClusterView` handed to a
callback. A kazoo session can be SUSPENDED (connection lost, session and the
ephemeral node may live on) or LOST (session expired, node gone): after LOST the
broker registers again, retrying while the old node still lingers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.common import topic_config
from broker.common.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
)
from broker.common.names import TRANSACTION_STATE_TOPIC, validate_topic_name
from broker.common.retry import Retry
from broker.coordination import zk
from broker.coordination.partition_state import PartitionState, assign_replicas, initial_state

log = logging.getLogger("logferry.registry")


@dataclass(frozen=True)
class BrokerInfo:
    """How to reach a live broker."""

    host: str
    port: int
    datacenter: str = ""
    rack: str = ""
    kafka_host: str = ""
    kafka_port: int = 0
    """The address of the broker's Kafka-protocol listener (port 0: none; docs/kafka.md)."""
    listeners: tuple[tuple[str, str, int], ...] = ()
    """Its named logferry listeners as (name, host, port); empty for a broker that
    registered none (an older one): its ``host``/``port`` is then its only listener."""
    endpoints: tuple[tuple[str, str, str, int, str], ...] = ()
    """Every listener, the Kafka one included, as (name, protocol, host, port, security)
    for people and dashboards (``endpoints`` in the registration, docs/console.md)."""

    def address(self, listener: str) -> tuple[str, int] | None:
        """``(host, port)`` of the named listener; the registered ``host``/``port`` for
        ``"default"`` or a broker that names no listeners; None if it lacks ``listener``."""
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        if listener == "default" or not self.listeners:
            return self.host, self.port
        return None


@dataclass(frozen=True)
class ClusterView:
    """A snapshot of the registries: live brokers, every topic's replica lists and
    settings, every partition's state, and the controller (-1 if none)."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    controller: int = -1
    session: int = 0
    """This broker's own session (registration creation zxid); 0 until registered."""
    topic_ids: dict[str, int] = field(default_factory=dict)
    """Each topic's identity: the creation zxid of its znode. A topic deleted and
    created again under the same name gets a new one."""

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when it has none (or no state yet)."""
        state = self.states.get((topic, partition))
        return state.leader if state is not None else -1


class BrokerRegistry:
    """Registers one broker and keeps a live view of the cluster for it."""

    def __init__(self, client: KazooClient, broker_id: int, info: BrokerInfo, on_change: Callable[[ClusterView], None]):
        self.client = client
        self.broker_id = broker_id
        self.info = info
        self._on_change = on_change
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, dict[int, list[int]]] = {}
        self._configs: dict[str, dict[str, Any]] = {}
        self._topic_ids: dict[str, int] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched_states: set[tuple[str, int]] = set()
        self._controller = -1
        self._watched_topics: set[str] = set()
        self._stopped = threading.Event()
        self._registering = threading.Lock()
        self.session = 0
        """Creation zxid of this broker's registration (0 until registered): its
        session as partition states record it (see broker.coordination.partition_state)."""

    # -- registration ---------------------------------------------------------------

    def register(self, timeout: float = 30.0) -> None:
        """Create the ephemeral broker node, waiting out a stale one from an old session."""
        path = zk.broker_path(self.broker_id)
        data = zk.encode(
            {
                "host": self.info.host,
                "port": self.info.port,
                "datacenter": self.info.datacenter,
                "rack": self.info.rack,
                **({"kafka": [self.info.kafka_host, self.info.kafka_port]} if self.info.kafka_port else {}),
                "listeners": {name: [host, port] for name, host, port in self.info.listeners},
                **(
                    {
                        "endpoints": [
                            {"name": name, "protocol": protocol, "host": host, "port": port, "security": security}
                            for name, protocol, host, port, security in self.info.endpoints
                        ]
                    }
                    if self.info.endpoints
                    else {}
                ),
            }
        )
        retry = Retry(initial=0.1, maximum=2.0, deadline=timeout)
        with self._registering:
            while not self._stopped.is_set():
                try:
                    _, stat = self.client.create(path, data, ephemeral=True, makepath=True, include_data=True)
                    self.session = stat.czxid
                    log.info("registered broker %d at %s", self.broker_id, path)
                    self._publish()
                    return
                except NodeExistsError:
                    try:
                        _, stat = self.client.get(path)
                    except NoNodeError:
                        continue
                    if stat.ephemeralOwner == self.client.client_id[0]:
                        self.session = stat.czxid  # ours already (a retried create)
                        self._publish()
                        return
                    if retry.expired:
                        raise ZooKeeperError(
                            f"broker id {self.broker_id} is registered by another live "
                            f"process ({path}); give each broker a unique broker.id"
                        ) from None
                    log.info("waiting for stale registration %s to expire", path)
                    retry.sleep()
                except (ConnectionLoss, OperationTimeoutError, SessionExpiredError) as exc:
                    # The create may or may not have happened; the next try finds out
                    # (a node of our own session counts as registered, above).
                    if retry.expired:
                        raise ZooKeeperError(
                            f"could not register broker {self.broker_id} with ZooKeeper "
                            f"within {timeout:.0f}s ({type(exc).__name__})"
                        ) from None
                    log.info("registration interrupted (%s); trying again", type(exc).__name__)
                    retry.sleep()

    def deregister(self, timeout: float = 5.0) -> None:
        """Stop watching and remove the broker node now, if this session made it, so
        clients stop routing here at once (waiting at most ``timeout`` s: without
        ZooKeeper the node goes when the session expires). A node of another session
        (a live broker with the same id, which made this one's start fail) is kept."""
        self._stopped.set()
        if not self.client.connected:
            log.warning("not connected to ZooKeeper: this broker's registration goes when its session expires")
            return
        path = zk.broker_path(self.broker_id)
        try:
            # bounded: kazoo waits for ever on a call queued while it reconnects
            _, stat = self.client.get_async(path).get(timeout=timeout)
            if stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete_async(path, version=stat.version).get(timeout=timeout)
        except NoNodeError:
            pass
        except Exception as exc:
            log.warning(
                "could not remove this broker's registration (%s); it goes when its ZooKeeper session expires",
                type(exc).__name__,
            )

    def _state_listener(self, state: str) -> None:
        if self._stopped.is_set():
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: broker %d will register again", self.broker_id)
            self.session = 0
            self._rejoin_pending = True
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; still serving from the last view")
        elif state == KazooState.CONNECTED and getattr(self, "_rejoin_pending", False):
            self._rejoin_pending = False
            threading.Thread(target=self._rejoin, name="zk-rejoin", daemon=True).start()

    def _rejoin(self) -> None:
        # kazoo's ChildrenWatch/DataWatch re-read their nodes on reconnection by
        # themselves; only the ephemeral registration has to be made again, and until
        # it is, this broker is invisible to clients and to the controller: keep trying.
        retry = Retry(initial=1.0, maximum=30.0)
        while not self._stopped.is_set():
            try:
                self.register(timeout=60.0)
                return
            except Exception as exc:
                delay = retry.next_delay()
                log.warning("could not register again after session loss (%s); trying again in %.0fs", exc, delay)
                self._stopped.wait(delay)

    # -- watching -------------------------------------------------------------------

    def watch(self) -> None:
        """Watch brokers and topics; the first view is published before this returns.

        Call before :meth:`register` and before serving, so the broker never answers
        "unknown topic" for a topic it simply has not heard of yet.
        """
        self.client.add_listener(self._state_listener)
        self._watch_registries()

    def _watch_registries(self) -> None:
        ChildrenWatch(self.client, zk.BROKER_IDS, self._brokers_changed)
        ChildrenWatch(self.client, zk.BROKER_TOPICS, self._topics_changed)
        DataWatch(self.client, zk.CONTROLLER, self._controller_changed)

    def _controller_changed(self, data: bytes | None, stat: object, event: object = None) -> bool:
        # kazoo's DataWatch calls func(data, stat, event) and, on a TypeError, calls
        # func(data, stat) again: every watcher takes the event, so a TypeError raised
        # inside one is never mistaken for a signature mismatch (and the call repeated).
        if self._stopped.is_set():
            return False
        try:
            controller = int(zk.decode(data).get("broker_id", -1)) if data else -1
        except (TypeError, ValueError):
            controller = -1
        with self._lock:
            self._controller = controller
        self._publish()
        return True

    def _brokers_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set():
            return False
        brokers: dict[int, BrokerInfo] = {}
        for child in children:
            try:
                raw, _ = self.client.get(f"{zk.BROKER_IDS}/{child}")
                data = zk.decode(raw)
                brokers[int(child)] = BrokerInfo(
                    str(data.get("host", "")),
                    int(data.get("port", 0)),
                    str(data.get("datacenter", "")),
                    str(data.get("rack", "")),
                    *_kafka_address(data),
                    listeners=tuple((name, *address) for name, address in zk.registered_listeners(data).items()),
                )
            except (NoNodeError, ValueError):
                continue
        with self._lock:
            self._brokers = brokers
        self._publish()
        return True

    def _topics_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set():
            return False
        current = set(children)
        with self._lock:
            for gone in set(self._topics) - current:
                self._forget_topic(gone)
            new = current - self._watched_topics
            self._watched_topics |= new
            self._watched_topics &= current
        for topic in sorted(new):
            DataWatch(self.client, zk.topic_path(topic), self._topic_data_watcher(topic))
        self._publish()
        return True

    def _topic_data_watcher(self, topic: str) -> Callable[..., bool]:
        def watcher(data: bytes | None, stat: object, event: object = None) -> bool:
            if self._stopped.is_set():
                return False
            new_partitions: list[int] = []
            with self._lock:
                if data is None and stat is None:
                    self._forget_topic(topic)
                    self._watched_topics.discard(topic)
                    stop = True
                else:
                    self._topics[topic] = zk.read_assignment(data)
                    self._configs[topic] = zk.read_topic_config(data)
                    self._topic_ids[topic] = int(getattr(stat, "czxid", 0))
                    new_partitions = [p for p in self._topics[topic] if (topic, p) not in self._watched_states]
                    self._watched_states.update((topic, p) for p in new_partitions)
                    stop = False
            for partition in new_partitions:
                DataWatch(self.client, zk.partition_state_path(topic, partition), self._state_watcher(topic, partition))
            self._publish()
            return not stop

        return watcher

    def _state_watcher(self, topic: str, partition: int) -> Callable[..., bool]:
        key = (topic, partition)

        def watcher(data: bytes | None, stat: object, event: object = None) -> bool:
            if self._stopped.is_set():
                return False
            with self._lock:
                if topic not in self._topics and data is None:
                    self._states.pop(key, None)
                    self._watched_states.discard(key)
                    return False
                state = PartitionState.decode(data, getattr(stat, "version", -1), getattr(stat, "czxid", 0))
                if state is None:
                    self._states.pop(key, None)
                else:
                    self._states[key] = state
            self._publish()
            return True

        return watcher

    def _forget_topic(self, topic: str) -> None:
        """Drop a deleted topic (lock held); its state watches end on their own."""
        self._topics.pop(topic, None)
        self._configs.pop(topic, None)
        self._topic_ids.pop(topic, None)
        for key in [k for k in self._states if k[0] == topic]:
            del self._states[key]

    def _publish(self) -> None:
        self._on_change(self.view())

    def view(self) -> ClusterView:
        """The current snapshot."""
        with self._lock:
            return ClusterView(
                dict(self._brokers),
                {t: dict(a) for t, a in self._topics.items()},
                {t: dict(c) for t, c in self._configs.items()},
                dict(self._states),
                self._controller,
                self.session,
                dict(self._topic_ids),
            )

    def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """Read one partition's state from ZooKeeper now (blocking)."""
        try:
            raw, stat = self.client.get(zk.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionState.decode(raw, stat.version, stat.czxid)

    # -- topic administration (blocking; call from a worker thread) -------------------

    def _live_brokers(self) -> tuple[dict[int, str], dict[int, int]]:
        """Live broker id -> rack, and id -> session (registration creation zxid)."""
        racks: dict[int, str] = {}
        live: dict[int, int] = {}
        for child in self.client.get_children(zk.BROKER_IDS):
            try:
                raw, stat = self.client.get(f"{zk.BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            racks[int(child)] = str(zk.decode(raw).get("rack", ""))
            live[int(child)] = stat.czxid
        return racks, live

    def create_topic(
        self,
        topic: str,
        partitions: int,
        replication_factor: int = 1,
        min_insync_replicas: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> dict[int, list[int]]:
        """Place a new topic's replicas on the live brokers and record it with its
        settings (checked, :mod:`broker.common.topic_config`) and the initial state of
        every partition (the first live replica leads)."""
        validate_topic_name(topic)
        racks, live = self._live_brokers()
        config = topic_config.validate(config or {})
        if min_insync_replicas is not None:
            config["min_insync_replicas"] = min_insync_replicas
        topic_config.check_min_insync(config, replication_factor)
        try:
            replicas = assign_replicas(topic, partitions, replication_factor, racks)
        except ValueError as exc:
            raise InvalidRequestError(f"cannot create topic {topic!r}: {exc}") from None
        try:
            self.client.create(zk.topic_path(topic), zk.encode_topic(replicas, config), makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"topic {topic!r} already exists") from None
        self._create_states(topic, {p: replicas[p] for p in sorted(replicas)}, live)
        log.info(
            "created topic %s with %d partitions, replication factor %d: %s%s",
            topic,
            partitions,
            replication_factor,
            replicas,
            f", settings {config}" if config else "",
        )
        return replicas

    def _create_states(self, topic: str, replicas: dict[int, list[int]], live: dict[int, int]) -> None:
        # The states go in after the assignment (pipelined); the controller fills in any
        # state missing after a crash here, and may beat us to some: that is fine.
        pending = [
            self.client.create_async(
                zk.partition_state_path(topic, p), initial_state(reps, live).encode(), makepath=True
            )
            for p, reps in replicas.items()
        ]
        for result in pending:
            with contextlib.suppress(NodeExistsError):
                result.get(timeout=30)

    def _read_topic(self, topic: str) -> tuple[bytes, Any]:
        validate_topic_name(topic)
        try:
            raw, stat = self.client.get(zk.topic_path(topic))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None
        return raw, stat

    def alter_topic_config(self, topic: str, set_: dict[str, Any], delete: list[str]) -> dict[str, Any]:
        """Set and remove per-topic settings (a conditional write: a concurrent change
        is read again, never overwritten); returns the settings now in force. Every
        broker's watch on the topic node applies them."""
        for _ in range(20):
            raw, stat = self._read_topic(topic)
            replicas = zk.read_assignment(raw)
            config = topic_config.altered(zk.read_topic_config(raw), set_, delete)
            rf = min((len(r) for r in replicas.values()), default=1)
            topic_config.check_min_insync(config, rf)
            try:
                self.client.set(zk.topic_path(topic), zk.encode_topic(replicas, config), version=stat.version)
            except BadVersionError:
                continue
            log.info("topic %s settings now %s", topic, config)
            return config
        raise ZooKeeperError(f"topic {topic!r} keeps changing while its settings are altered; try again")

    def create_partitions(self, topic: str, partitions: int) -> dict[int, list[int]]:
        """Grow ``topic`` to ``partitions`` partitions, placing the new ones as creation
        does (:func:`assign_replicas`, rack-aware) with the topic's replication factor;
        returns the whole assignment. Fewer partitions than the topic has is refused
        (InvalidPartitionsError) and nothing changes, and so is any growth of
        ``__transaction_state`` (a transactional id's partition is its hash modulo the
        count: more partitions would lose the ids' states)."""
        if topic == TRANSACTION_STATE_TOPIC:
            raise InvalidPartitionsError(
                f"{topic} keeps its partition count: each transactional id's state lies in the partition its "
                "hash names; nothing changed"
            )
        for _ in range(20):
            raw, stat = self._read_topic(topic)
            current = zk.read_assignment(raw)
            if partitions < len(current):
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {len(current)} partitions; partitions cannot be "
                    f"removed (asked for {partitions}); nothing changed"
                )
            if partitions == len(current):
                raise InvalidPartitionsError(f"topic {topic!r} already has {partitions} partitions; nothing changed")
            rf = len(current[0]) if current else 1
            racks, live = self._live_brokers()
            try:
                placed = assign_replicas(topic, partitions, rf, racks)
            except ValueError as exc:
                raise InvalidPartitionsError(f"cannot add partitions to {topic!r}: {exc}") from None
            new = {p: placed[p] for p in range(len(current), partitions)}
            assignment = {**current, **new}
            try:
                self.client.set(
                    zk.topic_path(topic), zk.encode_topic(assignment, zk.read_topic_config(raw)), version=stat.version
                )
            except BadVersionError:
                continue
            self._create_states(topic, new, live)
            log.info("topic %s grew from %d to %d partitions: %s", topic, len(current), partitions, new)
            return assignment
        raise ZooKeeperError(f"topic {topic!r} keeps changing while partitions are added; try again")

    def delete_topic(self, topic: str) -> None:
        """Remove a topic's registry node; every broker then deletes its partitions.
        ``__transaction_state`` is refused (InvalidTopicError): it holds every
        transactional id's state, and its coordinators would start again from nothing."""
        validate_topic_name(topic)
        if topic == TRANSACTION_STATE_TOPIC:
            raise InvalidTopicError(
                f"{topic} is internal: it holds the transaction coordinators' state, and deleting it would "
                "forget every transactional id's epoch and open transaction; nothing deleted"
            )
        if self.client.exists(zk.topic_path(topic)) is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        for attempt in range(5):
            try:
                self.client.delete(zk.topic_path(topic), recursive=True)
                break
            except NotEmptyError:  # a state znode written meanwhile: delete again
                if attempt == 4:
                    raise ZooKeeperError(
                        f"topic {topic!r} keeps getting new znodes while being deleted; try again"
                    ) from None
                time.sleep(0.1)
        log.info("deleted topic %s", topic)


def _kafka_address(data: dict[str, Any]) -> tuple[str, int]:
    """The registered Kafka listener ``(host, port)``, ``("", 0)`` when there is none."""
    kafka = data.get("kafka")
    if isinstance(kafka, list) and len(kafka) == 2:
        return str(kafka[0]), int(kafka[1])
    return "", 0
