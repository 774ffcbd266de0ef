"""A broker's replicas: which partitions it leads or follows, on the event loop.

The server hands every new :class:`~broker.coordination.registry.ClusterView` to
:meth:`ReplicaManager.apply`, which moves each hosted partition between the roles of
:mod:`.roles`:

* **leader**: takes produce requests, serves consumers up to the high watermark,
  records its followers' fetches, acknowledges acks=all batches once every in-sync
  replica has them, and writes ISR changes to ZooKeeper (:mod:`.leader`,
  :mod:`.acks`), while its connection and lease let it (:mod:`.lease`);
* **follower**: a :class:`.fetcher.ReplicaFetcher` per leader copies the bytes,
  first comparing the tail past the last known high watermark and truncating what
  the leader does not have (:mod:`.follower`, :mod:`.reconcile`);
* **offline**: wait for the controller.

This module is the hub: the lifecycle (checkpoints, the upkeep task, stopping),
taking up and leaving roles, and the methods the server calls. It depends on the
broker only through :class:`.services.ReplicationServices`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.common.errors import LogferryError, NotLeaderError
from broker.common.names import partition_dir_name
from broker.coordination.partition_state import PartitionState
from broker.coordination.reassignment import THROTTLE_KEY
from broker.coordination.registry import ClusterView
from broker.replication import acks, progress
from broker.replication.checkpoint import checkpoint_replicas, read_checkpoint
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.follower import FollowerApplier
from broker.replication.isr import LeaderTracker
from broker.replication.leader import LeaderSide
from broker.replication.lease import Fencing, WriteLease
from broker.replication.roles import (
    FOLLOWER,
    LEADER,
    OFFLINE,
    Replica,
    role_for,
    same_term,
)
from broker.replication.services import PartitionKey, ReplicationServices
from broker.replication.throttle import Throttle
from broker.wire.fetch import ReplicaFetchAnswerPart

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from broker.coordination.registry import BrokerRegistry
    from broker.storage.partition_log import PartitionLog

log = logging.getLogger("logferry.replication")

CHECKPOINT_INTERVAL_S = 5.0


class ReplicaManager:
    """Roles, high watermarks, acks=all and ISR upkeep for a broker's partitions."""

    def __init__(self, services: ReplicationServices):
        self.services = services
        self.config = services.config
        self.me = services.config.broker_id
        self.replicas: dict[PartitionKey, Replica] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.session = 0
        self.view = ClusterView()
        """The last view applied (the fetchers look leaders' addresses up in it)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped = threading.Event()
        self._checkpoint: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.lease = WriteLease(services, self.stopped)
        self.fencing = Fencing(self)
        self.leader = LeaderSide(self)
        self.follower = FollowerApplier(services)
        self.throttle = Throttle()
        """One bucket for every throttled follower fetch of this broker."""

    # -- lifecycle ------------------------------------------------------------------

    def load_checkpoints(self) -> None:
        """Read every log dir's high-watermark checkpoint (before the first view)."""
        for log_dir in self.config.log_dirs:
            self._checkpoint.update(read_checkpoint(log_dir))

    def start(self, loop: asyncio.AbstractEventLoop, zk_client: KazooClient, registry: BrokerRegistry) -> None:
        """Start the ISR upkeep loop and watch the ZooKeeper connection (the server
        calls this once connected and registered)."""
        self.services.zk = zk_client
        self.services.registry = registry
        self.loop = loop
        self._tasks.append(self.services.background.start(self._upkeep_loop(), "isr-upkeep"))
        zk_client.add_listener(self.fencing.listener)
        self.lease.start()

    async def stop(self) -> None:
        """Stop fetching, fail waiting acks, write the last checkpoint."""
        self.stopped.set()
        await self.services.background.cancel(self._tasks)
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for replica in self.replicas.values():
            acks.fail(replica, NotLeaderError("the broker is shutting down"), self.me)
        await checkpoint_replicas(self.replicas.values(), self.services.fsync_pool)

    async def _upkeep_loop(self) -> None:
        """Expire acks=all waits, propose ISR changes, write checkpoints."""
        lag = self.config.replica_lag_time_max_ms / 1000
        tick = min(max(lag / 4, 0.05), 0.5)
        next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        next_progress = 0.0
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for replica in list(self.replicas.values()):
                if replica.role != LEADER or replica.tracker is None:
                    continue
                if replica.pending_acks:
                    acks.expire(replica, now, self.config.acks_all_timeout_ms)
                if not self.fencing.fenced:  # (None while an ISR write is out or unsettled)
                    proposed = replica.tracker.proposed_isr(now, lag)
                    if proposed is not None:
                        self.leader.write_isr(replica, proposed)
            if now >= next_progress:  # copies for a reassignment: for `reassign verify`
                next_progress = now + 1.0
                rows = progress.copying(self.replicas.values())
                if rows and self.services.zk is not None:
                    asyncio.get_running_loop().run_in_executor(
                        self.services.admin_pool, progress.publish, self.services.zk, self.me, rows
                    )
            if now >= next_checkpoint:
                next_checkpoint = now + CHECKPOINT_INTERVAL_S
                await checkpoint_replicas(self.replicas.values(), self.services.fsync_pool)

    # -- roles ----------------------------------------------------------------------

    def apply(self, view: ClusterView) -> None:
        """Bring every hosted partition's role in line with ``view`` (loop thread)."""
        self.view = view
        self.session = view.session
        for topic, assignment in view.topics.items():
            config = view.configs.get(topic, {})
            for partition, replicas in assignment.items():
                if self.me not in replicas:
                    continue
                key = (topic, partition)
                replica = self.replicas.get(key)
                if replica is None:
                    plog = self.services.logs.get(topic, partition)
                    if plog is None:
                        continue
                    replica = self.replicas[key] = Replica(key, plog)
                    checkpoint = self._checkpoint.get(plog.name)
                    if len(replicas) > 1:
                        hw = plog.start_offset if checkpoint is None else checkpoint
                        plog.set_high_watermark(min(max(hw, plog.start_offset), plog.end_offset))
                if replica.tracker is not None and replica.replicas and set(replica.replicas) != set(replicas):
                    replica.tracker.set_replicas(replicas, time.monotonic())
                replica.replicas = list(replicas)
                replica.throttle = reassign_throttle(config, partition, self.me)
                # A topic's own setting (checked against its replication factor when it
                # was created) wins; the broker default is capped at the replica count,
                # so a default of 2 does not refuse every acks=all write to a topic of 1.
                replica.min_insync = int(
                    config.get("min_insync_replicas", min(self.config.min_insync_replicas, len(replicas)))
                )
                self.transition(replica, view.states.get(key))
        for key in [k for k in self.replicas if k[0] not in view.topics]:
            replica = self.replicas.pop(key)
            self._leave_role(replica, NotLeaderError(f"topic {key[0]!r} was deleted"))

    def transition(self, replica: Replica, state: PartitionState | None) -> None:
        """Take up the role ``state`` gives ``replica`` (or just adopt ``state`` when
        it keeps the same leader and epoch)."""
        role, leader = role_for(state, self.me, self.session)
        old = replica.state
        if old is not None and state is not None and state.older_than(old):
            return  # a view from before our own ISR write: never go back to it
        if same_term(replica, state, role):
            assert old is not None and state is not None
            replica.state = state
            if (
                role == LEADER
                and replica.tracker is not None
                and (state.version, state.created) != (old.version, old.created)
            ):
                # The controller may have dropped a dead follower; a newer version also
                # settles an ISR write of ours whose outcome was unknown.
                replica.tracker.adopt(state.isr, state.version)
                self.leader.update_high_watermark(replica)
            return
        self._leave_role(replica, NotLeaderError(f"partition {replica.key[0]}-{replica.key[1]} changed leader"))
        replica.state = state
        replica.role = role
        name = f"{replica.key[0]}-{replica.key[1]}"
        if role == LEADER:
            assert state is not None
            plog = replica.plog
            replica.tracker = LeaderTracker(
                self.me, replica.replicas, state.isr, plog.visible_end, time.monotonic(), epoch_start=plog.end_offset
            )
            if replica.replicated:
                plog.set_high_watermark(replica.tracker.high_watermark)
            log.info(
                "%s: leader in epoch %d, isr %s, log end %d", name, state.leader_epoch, list(state.isr), plog.end_offset
            )
            self.leader.update_high_watermark(replica)
        elif role == FOLLOWER:
            assert state is not None
            plog = replica.plog
            mark = plog.visible_end
            replica.reconcile_at = mark if mark < plog.end_offset else None
            replica.retry_at = 0.0
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
                fetcher.start(self.services.background)
            fetcher.add(replica)
            log.info(
                "%s: following broker %d in epoch %d from offset %d%s",
                name,
                leader,
                state.leader_epoch,
                plog.end_offset,
                f" (comparing from {mark})" if replica.reconcile_at is not None else "",
            )
        elif state is not None and state.leader == self.me:
            log.info(
                "%s: ZooKeeper names this broker leader in an earlier session; waiting "
                "for the controller to elect again",
                name,
            )

    def reconfirm(self, states: Mapping[PartitionKey, PartitionState | None]) -> None:
        """After a reconnect (see :class:`.lease.Fencing`): take the current session
        and the roles of the partition states read since."""
        registry = self.services.registry
        self.session = registry.session if registry else 0
        for key, state in states.items():
            replica = self.replicas.get(key)
            if replica is not None:
                self.transition(replica, state)

    def forget(self, key: PartitionKey) -> None:
        """Drop a replica whose log is about to be deleted (and its checkpointed mark)."""
        replica = self.replicas.pop(key, None)
        if replica is not None:
            self._leave_role(replica, NotLeaderError(f"partition {key[0]}-{key[1]} belongs to a deleted topic"))
        self._checkpoint.pop(partition_dir_name(*key), None)

    def _leave_role(self, replica: Replica, error: LogferryError) -> None:
        if replica.role == LEADER:
            acks.fail(replica, error, self.me)
            replica.tracker = None
            self.services.wake_fetchers(replica.key)
        elif replica.role == FOLLOWER and replica.state is not None:
            fetcher = self.fetchers.get(replica.state.leader)
            if fetcher is not None:
                fetcher.remove(replica.key)
        replica.role = OFFLINE

    # -- what the server calls --------------------------------------------------------

    def leader_log(self, topic: str, partition: int, for_write: bool, acks_all: bool = False) -> PartitionLog | None:
        """See :meth:`.leader.LeaderSide.leader_log`."""
        return self.leader.leader_log(topic, partition, for_write, acks_all)

    def check_acks_all(self, topic: str, partition: int) -> None:
        """Refuse an acks=all produce before appending when too few replicas are in sync."""
        acks.check_min_insync(self.replicas[(topic, partition)])

    def wait_for_replicas(self, topic: str, partition: int, end: int, pending: Any, index: int) -> bool:
        """Hold an acks=all answer until the ISR has ``end``; False if it already has."""
        return acks.wait(self.replicas[(topic, partition)], end, pending, index, self.config.acks_all_timeout_ms)

    def check_replica_fetch(self, topic: str, partition: int, epoch: int) -> Replica:
        """Validate a follower's fetch: we lead the partition in the epoch it names."""
        return self.leader.check_replica_fetch(topic, partition, epoch)

    def record_replica_fetch(self, replica: Replica, follower: int, offset: int) -> None:
        """A follower fetched at ``offset``: it has everything below."""
        self.leader.record_replica_fetch(replica, follower, offset)

    def on_publishable(self, key: PartitionKey) -> None:
        """The leader's publishable end moved (a flush, or an append to a log visible on
        write): the high watermark may follow."""
        self.leader.on_publishable(key)

    # -- what the fetchers call -------------------------------------------------------

    def fetch_position(self, replica: Replica) -> int:
        """Where the next fetch for ``replica`` starts."""
        return self.follower.fetch_position(replica)

    def on_fetched(
        self, replica: Replica, epoch: int, offset: int, result: ReplicaFetchAnswerPart, data: memoryview
    ) -> None:
        """Apply one partition's part of a replica fetch response."""
        self.follower.on_fetched(replica, epoch, offset, result, data)

    # -- reporting --------------------------------------------------------------------

    def under_replicated(self) -> list[PartitionKey]:
        """Partitions this broker leads whose ISR is smaller than their replica list."""
        return sorted(
            k
            for k, r in self.replicas.items()
            if r.role == LEADER and r.tracker is not None and len(r.tracker.isr) < len(r.replicas)
        )

    def role_counts(self) -> Counter[str]:
        """Number of hosted partitions per role."""
        return Counter(r.role for r in self.replicas.values())


def reassign_throttle(config: Mapping[str, Any], partition: int, me: int) -> int:
    """Bytes/s to fetch ``partition`` at when a reassignment added this broker to it."""
    entry = config.get(THROTTLE_KEY)
    if not isinstance(entry, dict):
        return 0
    try:
        added = entry.get("adding", {}).get(str(partition), [])
        return int(entry["bytes_per_s"]) if me in added else 0
    except (AttributeError, KeyError, TypeError, ValueError):
        return 0


__all__ = ["FOLLOWER", "LEADER", "OFFLINE", "Replica", "ReplicaManager", "reassign_throttle"]
