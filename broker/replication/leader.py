"""The leader's side: who may write, followers' fetches, the high watermark, the ISR.

While this broker leads a partition it

* answers produce and fetch requests for it (:meth:`LeaderSide.leader_log`), taking
  acks 0 and 1 writes only while it is not fenced and its lease runs (:mod:`.lease`),
  acks=all writes also while ZooKeeper is away (Kafka's rule, see the method);
* checks each follower's fetch against its leader epoch and records how far the
  follower has got (:meth:`LeaderSide.check_replica_fetch`,
  :meth:`LeaderSide.record_replica_fetch`): the sans-IO bookkeeping is
  :class:`.isr.LeaderTracker`;
* moves the high watermark, which wakes consumers and answers acks=all waits
  (:mod:`.acks`);
* writes ISR changes to ZooKeeper conditionally on the state's version, under its
  epoch, in the admin pool (:meth:`LeaderSide.write_isr`). A write that was refused
  or whose answer was lost is settled by a read made after it
  (:meth:`LeaderSide.refresh_state`): until then the proposed members keep counting
  for acks, because ZooKeeper may already name them.

Everything runs on the event loop; ZooKeeper calls run in the admin pool and report
back with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from kazoo.exceptions import BadVersionError, NoNodeError

from broker.common.errors import (
    LeaderNotAvailableError,
    NotLeaderError,
    StaleEpochError,
)
from broker.coordination import zk
from broker.coordination.partition_state import PartitionState
from broker.replication import acks
from broker.replication.isr import LeaderTracker
from broker.replication.lease import Fencing, WriteLease
from broker.replication.roles import LEADER, OFFLINE, Replica
from broker.replication.services import PartitionKey, ReplicationServices
from broker.storage.partition_log import PartitionLog

log = logging.getLogger("logferry.replication")


class LeaderHost(Protocol):
    """What :class:`LeaderSide` needs from the replica manager."""

    services: ReplicationServices
    me: int
    loop: asyncio.AbstractEventLoop | None
    stopped: threading.Event
    lease: WriteLease
    fencing: Fencing

    @property
    def replicas(self) -> Mapping[PartitionKey, Replica]: ...

    def transition(self, replica: Replica, state: PartitionState | None) -> None:
        """Bring ``replica``'s role in line with ``state``."""


class LeaderSide:
    """The partitions this broker leads: writes, followers' progress, the ISR."""

    def __init__(self, host: LeaderHost):
        self.host = host

    def leader_log(self, topic: str, partition: int, for_write: bool, acks_all: bool = False) -> PartitionLog | None:
        """The log if this broker leads the partition; raises if another one does.

        None when the partition is not replicated here at all (the caller reports
        an unknown topic or partition).

        A write (``for_write``) to a replicated partition needs the leader's ZooKeeper
        connection and lease (:mod:`.lease`), unless it is acks=all (``acks_all``):
        Kafka's rule, which keeps a partition writable while ZooKeeper is away and
        every in-sync replica is up. It is safe because such a write is answered only
        once every replica in this leader's ISR has fetched it, and that ISR can only
        shrink through ZooKeeper (a write there that succeeded, or a read showing it
        did: the members of a write whose outcome is unknown keep counting). A new
        leader is elected only through ZooKeeper too, from the ISR written there,
        which is never larger than the one this leader counts; so the new leader was
        one of the replicas whose fetch confirmed every write acknowledged here, and
        from the moment it leads it fetches from this leader no more: a leader whose
        session expired while another was elected (a zombie) can append, but never
        confirm, and what it appended alone is cut when it follows. Acks 0 and 1
        writes have no such check, so a zombie would acknowledge and lose them: they
        stay refused while the leadership is in doubt.
        """
        replica = self.host.replicas.get((topic, partition))
        if replica is None:
            return None
        me = self.host.me
        if replica.role == LEADER:
            # A partition without other replicas cannot get a second leader (only its
            # one replica may ever lead it), so it keeps taking writes without ZooKeeper.
            if not for_write or not replica.replicated or acks_all:
                return replica.plog
            if not self.host.fencing.fenced and self.host.lease.valid():
                return replica.plog
            raise NotLeaderError(
                f"broker {me} cannot confirm with ZooKeeper that it "
                f"still leads {topic}-{partition} (connection lost or "
                "lease expired); retry, or write with acks=all, which it takes meanwhile"
            )
        state = replica.state
        if state is None or state.leader < 0 or replica.role == OFFLINE:
            raise LeaderNotAvailableError(
                f"partition {topic}-{partition} has no leader right "
                "now (election under way or every in-sync replica "
                "is down)"
            )
        raise NotLeaderError(f"partition {topic}-{partition} is led by broker {state.leader}, not broker {me}")

    def check_replica_fetch(self, topic: str, partition: int, epoch: int) -> Replica:
        """Validate a follower's fetch: we lead the partition in the epoch it names."""
        replica = self.host.replicas.get((topic, partition))
        if replica is None or replica.role != LEADER:
            leader = replica.state.leader if replica is not None and replica.state else -1
            raise NotLeaderError(f"broker {self.host.me} does not lead {topic}-{partition} (leader: {leader})")
        if epoch != replica.epoch:
            if epoch > replica.epoch:  # a newer leader exists: we are stale, find out now
                self.refresh_state(replica)
            raise StaleEpochError(
                f"{topic}-{partition}: follower names leader epoch {epoch}, this leader has epoch {replica.epoch}"
            )
        return replica

    def record_replica_fetch(self, replica: Replica, follower: int, offset: int) -> None:
        """A follower fetched at ``offset``: it has everything below."""
        tracker = replica.tracker
        if tracker is not None and tracker.record_fetch(follower, offset, replica.plog.end_offset, time.monotonic()):
            self.update_high_watermark(replica)

    def on_publishable(self, key: PartitionKey) -> None:
        """The leader's publishable end moved (see ``PartitionLog.publishable_end``): the
        high watermark may follow."""
        replica = self.host.replicas.get(key)
        if replica is not None and replica.tracker is not None and replica.replicated:
            self.update_high_watermark(replica)

    def update_high_watermark(self, replica: Replica) -> None:
        """Move the high watermark if it may (waking consumers), and answer the acks=all
        waits the ack set now holds."""
        tracker = replica.tracker
        plog = replica.plog
        if tracker is None:
            return
        if replica.replicated and tracker.advance_high_watermark(plog.end_offset, plog.publishable_end):
            plog.set_high_watermark(tracker.high_watermark)
            self.host.services.wake_consumers(replica.key)
        acks.release(replica)

    # -- the partition state in ZooKeeper ---------------------------------------------

    def refresh_state(self, replica: Replica, settles: LeaderTracker | None = None) -> None:
        """Read the partition's state from ZooKeeper (in the admin pool) and apply it on
        the loop, trying again every 0.5 s while ZooKeeper does not answer.

        ``settles``: the tracker whose failed ISR write this read, made after it,
        settles (a state still at the write's base version means it never happened).
        """
        registry = self.host.services.registry
        loop = self.host.loop
        if registry is None or loop is None or self.host.stopped.is_set():
            return

        def read() -> None:
            try:
                state = registry.read_state(*replica.key)
            except Exception:
                loop.call_soon_threadsafe(loop.call_later, 0.5, self.refresh_state, replica, settles)
                return
            loop.call_soon_threadsafe(self._apply_read_state, replica, state, settles)

        loop.run_in_executor(self.host.services.admin_pool, read)

    def _apply_read_state(self, replica: Replica, state: PartitionState | None, settles: LeaderTracker | None) -> None:
        if self.host.replicas.get(replica.key) is not replica or state is None:
            return  # forgotten meanwhile, or the topic is being deleted
        if replica.state is not None and state.older_than(replica.state):
            return  # a newer state was adopted meanwhile (it settled any write too)
        tracker = replica.tracker
        if (
            settles is not None
            and tracker is settles
            and state.leader == self.host.me
            and state.leader_epoch == replica.epoch
        ):
            replica.state = state
            tracker.adopt(state.isr, state.version, read_after_write=True)
            self.update_high_watermark(replica)
        else:
            self.host.transition(replica, state)

    def write_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """Write ``isr`` into the partition's state, conditional on the version the
        leader last saw (in the admin pool; the answer comes back on the loop)."""
        state = replica.state
        tracker = replica.tracker
        loop = self.host.loop
        assert state is not None and tracker is not None and loop is not None
        # replace() keeps the leader session and the znode's creation zxid, so a view
        # read before this write is recognised as older (PartitionState.older_than).
        new = replace(state, isr=isr)
        path = zk.partition_state_path(*replica.key)
        client = self.host.services.zk
        assert client is not None  # the upkeep loop runs once connected
        tracker.begin_write(isr, state.version)  # its members count for acks from now
        old_isr = state.isr

        def write() -> None:
            try:
                stat = client.set(path, new.encode(), version=state.version)
                result: Any = replace(new, version=stat.version)
            except Exception as exc:  # refused, or connection trouble
                result = exc
            loop.call_soon_threadsafe(self._isr_written, replica, tracker, old_isr, result)

        loop.run_in_executor(self.host.services.admin_pool, write)

    def _isr_written(self, replica: Replica, tracker: LeaderTracker, old_isr: tuple[int, ...], result: Any) -> None:
        name = f"{replica.key[0]}-{replica.key[1]}"
        services = self.host.services
        if replica.tracker is not tracker:
            return  # leadership moved on meanwhile; that tracker is gone
        if isinstance(result, PartitionState):
            if replica.state is None or not result.older_than(replica.state):
                replica.state = result  # (else a newer state, read since, holds it)
                tracker.adopt(result.isr, result.version)
            if len(result.isr) < len(old_isr):
                services.isr_changes[(("direction", "shrink"),)] += 1
                log.warning(
                    "%s: isr shrank %s -> %s (followers behind for more than %d ms)",
                    name,
                    list(old_isr),
                    list(result.isr),
                    services.config.replica_lag_time_max_ms,
                )
            else:
                services.isr_changes[(("direction", "grow"),)] += 1
                log.info("%s: isr grew %s -> %s (caught up)", name, list(old_isr), list(result.isr))
            self.update_high_watermark(replica)
        else:
            # Refused (the state changed) or unknown (connection trouble): the proposed
            # members keep counting for acks until a read made after the write settles it.
            if isinstance(result, (BadVersionError, NoNodeError)):
                log.info("%s: isr write lost a race (state changed); reading the state again", name)
            else:
                log.warning(
                    "%s: could not write the isr to ZooKeeper (%s%s); reading the "
                    "state to learn whether it was written",
                    name,
                    type(result).__name__,
                    f": {result}" if str(result) else "",
                )
            self.refresh_state(replica, settles=tracker)


__all__ = ["LeaderHost", "LeaderSide"]
