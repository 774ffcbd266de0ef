"""The controller: one broker, elected through ZooKeeper, that moves leadership.

Every broker runs a :class:`Controller`; the one that creates the ephemeral
``/controller`` znode is active, the others wait for it to vanish. The active one
bumps ``/controller_epoch`` and makes every state write a transaction that checks
that epoch's version, so a controller that lost its session (a zombie) cannot write
any more. It reacts to brokers coming and going, to new topics (filling in any
missing partition state), to the preferred-leader trigger znode written by
``logferry topic elect-leaders``, to brokers asking for a controlled shutdown
(``/admin/controlled_shutdown/<id>``: their leadership moves to other in-sync
replicas), to a partition reassignment (``/admin/reassign_partitions``, carried out
by :class:`.reassigner.Reassigner`), and, when enabled, periodically moves leadership
back to each partition's preferred replica. Decisions are :func:`.state.elect`;
this module is the IO around it, on one thread fed by a queue.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, MutableMapping

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.common.metrics import Labels
from broker.coordination import zk
from broker.coordination.partition_state import PartitionState, elect, initial_state
from broker.replication.reassigner import PASS_INTERVAL_S, Reassigner

log = logging.getLogger("logferry.controller")

_ELECT, _BROKERS, _TOPICS, _PREFERRED, _STOP = "elect", "brokers", "topics", "preferred", "stop"
_SHUTDOWN, _REASSIGN = "shutdown", "reassign"


class Controller:
    """Competes for the controller role and, while holding it, keeps leaders elected."""

    def __init__(
        self,
        client: KazooClient,
        broker_id: int,
        *,
        unclean_election: bool = False,
        auto_rebalance_interval_s: float = 0.0,
        elections: MutableMapping[Labels, float] | None = None,
    ):
        self.client = client
        self.broker_id = broker_id
        self.unclean_election = unclean_election
        self.auto_rebalance_interval_s = auto_rebalance_interval_s
        self.active = False
        self._stopping = False
        self.elections: MutableMapping[Labels, float] = elections if elections is not None else {(): 0}
        """Counter of leader changes this broker made as controller (a metric)."""
        self.offline_partitions = 0
        """Partitions without a leader at the end of the last pass."""
        self._epoch_version = -1
        self._generation = 0
        self._events: queue.Queue[str] = queue.Queue()
        self.reassigner = Reassigner(self)
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

    def start(self) -> None:
        """Start competing (call once the broker is registered)."""
        self._thread.start()
        self.client.add_listener(self._session_listener)
        DataWatch(self.client, zk.CONTROLLER, self._controller_node_changed)

    def stop(self) -> None:
        """Give up the role (deleting ``/controller`` if ours) and end the thread."""
        self._stopping = True
        self._events.put(_STOP)
        self._thread.join(timeout=10)
        was_active, self.active = self.active, False
        # Without a connection the node goes when the session expires; with one, wait a
        # bounded time (kazoo waits for ever on a call queued while it reconnects).
        if was_active and self.client.connected:
            try:
                _, stat = self.client.get_async(zk.CONTROLLER).get(timeout=5.0)
                if stat.ephemeralOwner == self.client.client_id[0]:
                    self.client.delete_async(zk.CONTROLLER, version=stat.version).get(timeout=5.0)
            except Exception:
                log.debug("could not delete %s", zk.CONTROLLER, exc_info=True)

    # -- callbacks from kazoo threads: they only queue events --------------------------

    def _session_listener(self, state: str) -> bool:
        if self._stopping:
            return True  # kazoo removes a listener that returns True
        if state == KazooState.LOST and self.active:
            log.warning("controller %d lost its ZooKeeper session: resigning", self.broker_id)
            self.active = False
        elif state == KazooState.CONNECTED:
            self._events.put(_ELECT)
        return False

    def _controller_node_changed(
        self, data: bytes | None, stat: object, event: object = None
    ) -> bool:  # DataWatch passes event
        if self._stopping:
            return False
        if data is None:
            self._events.put(_ELECT)
        return True

    def _watcher(self, event: str, generation: int) -> Callable[..., bool]:
        def changed(*_args: object) -> bool:
            if not self.active or generation != self._generation:
                return False
            self._events.put(event)
            return True

        return changed

    # -- the controller thread --------------------------------------------------------

    def _run(self) -> None:
        next_rebalance = time.monotonic() + self.auto_rebalance_interval_s
        while True:
            timeout = None
            if self.active and self.auto_rebalance_interval_s > 0:
                timeout = max(next_rebalance - time.monotonic(), 0.0)
            reassigning = self.active and self.reassigner.running
            if reassigning:  # a reassignment advances every PASS_INTERVAL_S
                timeout = PASS_INTERVAL_S if timeout is None else min(timeout, PASS_INTERVAL_S)
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                if reassigning and (self.auto_rebalance_interval_s <= 0 or time.monotonic() < next_rebalance):
                    event = _REASSIGN
                else:
                    event = _PREFERRED
                    next_rebalance = time.monotonic() + self.auto_rebalance_interval_s
            if event == _STOP:
                return
            try:
                if event == _ELECT:
                    if not self.active:
                        self._try_to_become_controller()
                elif self.active and event == _REASSIGN:
                    self.reassigner.run_pass()
                elif self.active:
                    self._pass(preferred=event == _PREFERRED)
                    if event == _PREFERRED:
                        with contextlib.suppress(NoNodeError):
                            self.client.delete(zk.PREFERRED_ELECTION)
            except _NotController:
                log.warning("broker %d is no longer the controller", self.broker_id)
                self.active = False
            except Exception:
                log.exception("controller event %r failed; retrying in 1s", event)
                time.sleep(1.0)
                self._events.put(event)

    def _try_to_become_controller(self) -> None:
        try:
            self.client.create(zk.CONTROLLER, zk.encode({"broker_id": self.broker_id}), ephemeral=True)
        except NodeExistsError:
            # Ours if an earlier attempt created it and then failed (its answer lost, or
            # the connection dropped before the takeover below finished): nobody else
            # competes while it exists, so this broker must finish taking office.
            try:
                _, stat = self.client.get(zk.CONTROLLER)
            except NoNodeError:
                return  # gone again: the watch on it queues another attempt
            if stat.ephemeralOwner != self.client.client_id[0]:
                return
            log.info(
                "broker %d finds its own %s from an interrupted attempt; taking office", self.broker_id, zk.CONTROLLER
            )
        self.client.ensure_path(zk.CONTROLLER_EPOCH)
        stat = self.client.set(zk.CONTROLLER_EPOCH, b"")
        self._epoch_version = stat.version
        self._generation += 1
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, stat.version)
        generation = self._generation
        ChildrenWatch(self.client, zk.BROKER_IDS, self._watcher(_BROKERS, generation))
        ChildrenWatch(self.client, zk.BROKER_TOPICS, self._watcher(_TOPICS, generation))
        self.client.ensure_path(zk.CONTROLLED_SHUTDOWN)
        ChildrenWatch(self.client, zk.CONTROLLED_SHUTDOWN, self._watcher(_SHUTDOWN, generation))

        def trigger(data: bytes | None, stat: object, event: object = None) -> bool:
            if not self.active or generation != self._generation:
                return False
            if stat is not None:
                self._events.put(_PREFERRED)
            return True

        DataWatch(self.client, zk.PREFERRED_ELECTION, trigger)

        def reassign(data: bytes | None, stat: object, event: object = None) -> bool:
            if not self.active or generation != self._generation:
                return False
            if stat is not None:
                self._events.put(_REASSIGN)
            return True

        DataWatch(self.client, zk.REASSIGN_PARTITIONS, reassign)

    def _live_brokers(self) -> tuple[dict[int, int], dict[int, int]]:
        """Live broker id -> session (registration creation zxid), and -> the id of
        its ZooKeeper session (the registration's ephemeral owner)."""
        live, owners = {}, {}
        for child in self.client.get_children(zk.BROKER_IDS):
            try:
                _, stat = self.client.get(zk.broker_path(int(child)))
            except NoNodeError:
                continue
            live[int(child)] = stat.czxid
            owners[int(child)] = stat.ephemeralOwner
        return live, owners

    def _shutting_down(self, owners: dict[int, int]) -> frozenset[int]:
        """Live brokers in a controlled shutdown: their request node was made by the
        session that registered them (a stale one of an earlier run does not count)."""
        shutting = set()
        for child in self.client.get_children(zk.CONTROLLED_SHUTDOWN):
            try:
                broker_id = int(child)
                _, stat = self.client.get(zk.controlled_shutdown_path(broker_id))
            except (NoNodeError, ValueError):
                continue
            if owners.get(broker_id) == stat.ephemeralOwner:
                shutting.add(broker_id)
        return frozenset(shutting)

    def _pass(self, preferred: bool) -> None:
        """Look at every partition once and write what :func:`elect` decides."""
        live, owners = self._live_brokers()
        shutting = self._shutting_down(owners)
        if shutting:
            log.info("brokers %s are shutting down: moving their leadership", sorted(shutting))
        offline = 0
        for topic in sorted(self.client.get_children(zk.BROKER_TOPICS)):
            try:
                raw, _ = self.client.get(zk.topic_path(topic))
            except NoNodeError:
                continue
            for partition, replicas in sorted(zk.read_assignment(raw).items()):
                state = self._settle(topic, partition, replicas, live, preferred, shutting)
                if state is not None and state.leader == -1:
                    offline += 1
        if offline and offline != self.offline_partitions:
            log.warning("%d partitions have no leader: every in-sync replica is down", offline)
        self.offline_partitions = offline

    def _settle(
        self,
        topic: str,
        partition: int,
        replicas: list[int],
        live: dict[int, int],
        preferred: bool,
        shutting: frozenset[int] = frozenset(),
    ) -> PartitionState | None:
        path = zk.partition_state_path(topic, partition)
        for _ in range(10):  # lost races with the leader's own ISR writes: read again
            state: PartitionState | None
            try:
                raw, stat = self.client.get(path)
                state = PartitionState.decode(raw, stat.version)
            except NoNodeError:
                state = None
            if state is None:
                new = initial_state(replicas, live)
                created = self._create_state(topic, partition, new)
                if created is None:
                    return None  # the topic is being deleted
                if created:
                    log.info("%s-%d: created missing state, leader %d", topic, partition, new.leader)
                    return new
                continue
            elected = elect(
                state, replicas, live, unclean=self.unclean_election, preferred=preferred, shutting=shutting
            )
            if elected is None:
                return state
            if self._write(path, elected, stat.version):
                if elected.leader != state.leader or elected.leader_epoch != state.leader_epoch:
                    self.elections[()] += 1
                    log.info(
                        "%s-%d: leader %d -> %d (epoch %d), isr %s",
                        topic,
                        partition,
                        state.leader,
                        elected.leader,
                        elected.leader_epoch,
                        list(elected.isr),
                    )
                else:
                    log.info(
                        "%s-%d: isr %s -> %s (dead replicas left)", topic, partition, list(state.isr), list(elected.isr)
                    )
                return elected
        return None

    def _create_state(self, topic: str, partition: int, state: PartitionState) -> bool | None:
        """Create a missing state znode (a topic creation cut short), in one transaction
        that also checks the topic still exists, so a topic being deleted is never
        brought back as an empty shell. None if the topic is gone."""
        topic_path = zk.topic_path(topic)
        topic_stat = self.client.exists(topic_path)
        if topic_stat is None:
            return None
        tx = self.client.transaction()
        tx.check(zk.CONTROLLER_EPOCH, self._epoch_version)
        tx.check(topic_path, topic_stat.version)
        for parent in (f"{topic_path}/partitions", f"{topic_path}/partitions/{partition}"):
            if self.client.exists(parent) is None:
                tx.create(parent)
        tx.create(zk.partition_state_path(topic, partition), state.encode())
        return self._committed(tx.commit())

    def _write(self, path: str, state: PartitionState, version: int) -> bool:
        """Write ``state`` if we are still the controller and nobody wrote meanwhile."""
        tx = self.client.transaction()
        tx.check(zk.CONTROLLER_EPOCH, self._epoch_version)
        tx.set_data(path, state.encode(), version=version)
        return self._committed(tx.commit())

    @staticmethod
    def _committed(results: list[object]) -> bool:
        """True if a transaction went through; False if it lost a race; raises
        _NotController if the controller epoch moved on."""
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise _NotController()
        failures = [r for r in results[1:] if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            return True
        if all(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError, RuntimeInconsistency)) for r in failures):
            return False
        raise failures[0]


class _NotController(Exception):
    """The controller epoch moved on: another broker is the controller now."""


__all__ = ["Controller"]
