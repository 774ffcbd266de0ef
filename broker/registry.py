"""The broker's side of the ZooKeeper registries: who is alive, which topics exist.

The broker registers itself as an ephemeral ``/brokers/ids/<id>`` and watches the
broker and topic registries; every change yields a fresh :class:`ClusterView` handed
to a callback. A kazoo session can be SUSPENDED (connection lost, session and the
ephemeral node may live on) or LOST (session expired, node gone): after LOST the
broker registers again, retrying while the old node still lingers.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError, NodeExistsError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker import zk
from broker.errors import TopicExistsError, UnknownTopicOrPartitionError, ZooKeeperError
from broker.topics import assign_partitions, validate_topic_name

log = logging.getLogger("logferry.registry")


@dataclass(frozen=True)
class BrokerInfo:
    """How to reach a live broker."""

    host: str
    port: int
    datacenter: str = ""


@dataclass(frozen=True)
class ClusterView:
    """A snapshot of the registries: live brokers and every topic's assignment."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, dict[int, int]] = field(default_factory=dict)


class BrokerRegistry:
    """Registers one broker and keeps a live view of the cluster for it."""

    def __init__(self, client: KazooClient, broker_id: int, info: BrokerInfo,
                 on_change: Callable[[ClusterView], None]):
        self.client = client
        self.broker_id = broker_id
        self.info = info
        self._on_change = on_change
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, dict[int, int]] = {}
        self._watched_topics: set[str] = set()
        self._stopped = threading.Event()
        self._registering = threading.Lock()

    # -- registration ---------------------------------------------------------------

    def register(self, timeout: float = 30.0) -> None:
        """Create the ephemeral broker node, waiting out a stale one from an old session."""
        path = zk.broker_path(self.broker_id)
        data = zk.encode({"host": self.info.host, "port": self.info.port,
                          "datacenter": self.info.datacenter})
        deadline = time.monotonic() + timeout
        delay = 0.1
        with self._registering:
            while not self._stopped.is_set():
                try:
                    self.client.create(path, data, ephemeral=True, makepath=True)
                    log.info("registered broker %d at %s", self.broker_id, path)
                    return
                except NodeExistsError:
                    try:
                        _, stat = self.client.get(path)
                    except NoNodeError:
                        continue
                    if stat.ephemeralOwner == self.client.client_id[0]:
                        return  # ours already
                    if time.monotonic() > deadline:
                        raise ZooKeeperError(
                            f"broker id {self.broker_id} is registered by another live "
                            f"process ({path}); give each broker a unique broker.id"
                        ) from None
                    log.info("waiting for stale registration %s to expire", path)
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)

    def deregister(self) -> None:
        """Remove the broker node now so clients stop routing here at once."""
        self._stopped.set()
        try:
            self.client.delete(zk.broker_path(self.broker_id))
        except Exception:
            log.debug("could not delete broker node", exc_info=True)

    def _state_listener(self, state: str) -> None:
        if self._stopped.is_set():
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: broker %d will register again", self.broker_id)
            self._rejoin_pending = True
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; still serving from the last view")
        elif state == KazooState.CONNECTED and getattr(self, "_rejoin_pending", False):
            self._rejoin_pending = False
            threading.Thread(target=self._rejoin, name="zk-rejoin", daemon=True).start()

    def _rejoin(self) -> None:
        # kazoo's ChildrenWatch/DataWatch re-read their nodes on reconnection by
        # themselves; only the ephemeral registration has to be made again.
        try:
            self.register(timeout=60.0)
        except Exception:
            log.exception("could not register again after session loss")

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

    def _brokers_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set():
            return False
        brokers: dict[int, BrokerInfo] = {}
        for child in children:
            try:
                raw, _ = self.client.get(f"{zk.BROKER_IDS}/{child}")
                data = zk.decode(raw)
                brokers[int(child)] = BrokerInfo(str(data.get("host", "")),
                                                 int(data.get("port", 0)),
                                                 str(data.get("datacenter", "")))
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
                del self._topics[gone]
            new = current - self._watched_topics
            self._watched_topics |= new
            self._watched_topics &= current
        for topic in sorted(new):
            DataWatch(self.client, zk.topic_path(topic), self._topic_data_watcher(topic))
        self._publish()
        return True

    def _topic_data_watcher(self, topic: str) -> Callable:
        def watcher(data: bytes | None, stat: object) -> bool:
            if self._stopped.is_set():
                return False
            with self._lock:
                if data is None and stat is None:
                    self._topics.pop(topic, None)
                    self._watched_topics.discard(topic)
                    stop = True
                else:
                    self._topics[topic] = zk.read_assignment(data)
                    stop = False
            self._publish()
            return not stop
        return watcher

    def _publish(self) -> None:
        self._on_change(self.view())

    def view(self) -> ClusterView:
        """The current snapshot."""
        with self._lock:
            return ClusterView(dict(self._brokers),
                               {t: dict(a) for t, a in self._topics.items()})

    # -- topic administration (blocking; call from a worker thread) -------------------

    def create_topic(self, topic: str, partitions: int) -> dict[int, int]:
        """Place a new topic's partitions on the live brokers and record it."""
        validate_topic_name(topic)
        brokers = sorted(self.client.get_children(zk.BROKER_IDS), key=int)
        assignment = assign_partitions(topic, partitions, [int(b) for b in brokers])
        try:
            zk.create_topic_node(self.client, topic, assignment)
        except NodeExistsError:
            raise TopicExistsError(f"topic {topic!r} already exists") from None
        log.info("created topic %s with %d partitions: %s", topic, partitions, assignment)
        return assignment

    def delete_topic(self, topic: str) -> None:
        """Remove a topic's registry node; every broker then deletes its partitions."""
        validate_topic_name(topic)
        try:
            self.client.delete(zk.topic_path(topic), recursive=True)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None
        log.info("deleted topic %s", topic)
