"""A broker's replicas: which partitions it leads or follows, on the event loop.

The registry hands every new :class:`~broker.coordination.registry.ClusterView` to
:meth:`ReplicaManager.apply`, which moves each hosted partition between three roles:

* **leader**: the state names this broker *and its current session* as leader. It
  takes produce requests, serves consumers up to the high watermark, records its
  followers' fetches (:class:`.isr.LeaderTracker`), acknowledges acks=all batches
  once every in-sync replica has them, and writes ISR changes to ZooKeeper
  (conditionally, under its epoch).
* **follower**: another broker leads; a :class:`.fetcher.ReplicaFetcher` per leader
  copies the bytes, first comparing the tail past the last known high watermark
  (:mod:`.reconcile`) and truncating what the leader does not have.
* **offline**: no leader, or a state that names this broker in an older session
  (before a restart or a session expiry): wait for the controller.

A leader accepts writes only while it can be sure its ZooKeeper session is alive,
because a new leader is elected only after that session expires:

* while the connection is suspended or lost it refuses every produce (*fenced*);
  kazoo declares a connection gone after two thirds of the session timeout without
  an answer, and ZooKeeper expires the session only after the whole timeout, so the
  old leader stops before a new one is chosen;
* a *lease* covers a paused process (SIGSTOP, a VM freeze), which sees nothing until
  it runs again: a heartbeat thread sends ZooKeeper a ``sync`` (which must pass
  through the quorum's leader) every quarter of the session timeout, and writes are
  accepted only until three quarters of the timeout after the last heartbeat that
  was answered was sent. A leader resumed after its session expired finds its lease
  run out before it can take a single write.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NoNodeError

from broker.wire import records

from broker.coordination import zk
from broker.common.errors import (
    LeaderNotAvailableError,
    LogferryError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    StaleEpochError,
    StorageError,
)
from broker.replication.checkpoint import read_checkpoint, write_checkpoint
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.isr import LeaderTracker
from broker.replication.reconcile import matching_prefix
from broker.replication.state import PartitionState
from broker.storage.partition_log import PartitionLog
from broker.common.names import partition_dir_name

if TYPE_CHECKING:
    from broker.coordination.registry import ClusterView
    from broker.server.broker import Broker

log = logging.getLogger("logferry.replication")

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"
CHECKPOINT_INTERVAL_S = 5.0


_LEASE_CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def lease_clock() -> float:
    """Seconds on the clock the write lease runs on: CLOCK_BOOTTIME where there is one
    (Linux), which goes on counting while the machine is suspended, where the
    monotonic clock stops; ZooKeeper's session clock does not stop either."""
    return time.clock_gettime(_LEASE_CLOCK_ID)


class Replica:
    """This broker's replica of one partition and its current role."""

    __slots__ = ("key", "plog", "replicas", "state", "role", "tracker", "pending_acks",
                 "min_insync", "reconcile_at", "retry_at")

    def __init__(self, key: tuple[str, int], plog: PartitionLog):
        self.key = key
        self.plog = plog
        self.replicas: list[int] = []
        self.state: PartitionState | None = None
        self.role = OFFLINE
        self.tracker: LeaderTracker | None = None
        self.pending_acks: list[tuple[int, Any, int, float]] = []
        self.min_insync = 1
        self.reconcile_at: int | None = None
        self.retry_at = 0.0

    @property
    def epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def replicated(self) -> bool:
        return len(self.replicas) > 1


class ReplicaManager:
    """Roles, high watermarks, acks=all and ISR upkeep for a broker's partitions."""

    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.config = broker.config
        self.me = broker.config.broker_id
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.fenced = False
        self.session = 0
        self._checkpoint: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self.lease_until = 0.0
        """Writes are accepted until this :func:`lease_clock` time (renewed by the
        heartbeat thread)."""
        self._stopped = threading.Event()
        self._fences = 0
        """How often the connection was suspended or lost: an unfence decided on a
        check that began before a newer fence must not undo it."""

    # -- lifecycle ------------------------------------------------------------------

    def load_checkpoints(self) -> None:
        """Read every log dir's high-watermark checkpoint (before the first view)."""
        for log_dir in self.config.log_dirs:
            self._checkpoint.update(read_checkpoint(log_dir))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the ISR upkeep loop and watch the ZooKeeper connection."""
        self._loop = loop
        self._tasks.append(loop.create_task(self._upkeep_loop(), name="isr-upkeep"))
        self.broker._zk.add_listener(self._connection_listener)
        threading.Thread(target=self._heartbeat, name="zk-lease", daemon=True).start()

    def session_timeout(self) -> float:
        """The session timeout the lease is measured against: the configured one, or
        the one ZooKeeper granted if that is shorter (the server clamps requests to its
        own bounds, and it is the granted one after which a new leader can be elected)."""
        configured = self.config.zk_session_timeout_s
        granted = zk.granted_session_timeout(self.broker._zk)
        return configured if granted is None else min(configured, granted)

    def _heartbeat(self) -> None:
        """Renew the write lease: each answered ``sync`` proves the session was alive
        when it was sent (see the module docstring). A sync, not a read: a ZooKeeper
        server cut off from its quorum still answers reads for a while, but a sync must
        pass through the quorum's leader, which is what keeps the session alive."""
        client = self.broker._zk
        while not self._stopped.is_set():
            session = self.session_timeout()
            sent = lease_clock()
            try:
                client.sync("/")
                self.lease_until = sent + session * 0.75
            except Exception:
                pass  # no answer, no renewal
            self._stopped.wait(max(session / 4 - (lease_clock() - sent), 0.01))

    async def stop(self) -> None:
        """Stop fetching, fail waiting acks, write the last checkpoint."""
        self._stopped.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for replica in self.replicas.values():
            self._fail_acks(replica, NotLeaderError("the broker is shutting down"))
        await self._write_checkpoints()

    # -- roles ----------------------------------------------------------------------

    def apply(self, view: "ClusterView") -> None:
        """Bring every hosted partition's role in line with ``view`` (loop thread)."""
        self.session = view.session
        for topic, assignment in view.topics.items():
            config = view.configs.get(topic, {})
            for partition, replicas in assignment.items():
                if self.me not in replicas:
                    continue
                key = (topic, partition)
                replica = self.replicas.get(key)
                if replica is None:
                    plog = self.broker.logs.get(topic, partition)
                    if plog is None:
                        continue
                    replica = self.replicas[key] = Replica(key, plog)
                    checkpoint = self._checkpoint.get(plog.name)
                    if len(replicas) > 1:
                        hw = plog.start_offset if checkpoint is None else checkpoint
                        plog.set_high_watermark(min(max(hw, plog.start_offset), plog.end_offset))
                replica.replicas = list(replicas)
                # A topic's own setting (checked against its replication factor when it
                # was created) wins; the broker default is capped at the replica count,
                # so a default of 2 does not refuse every acks=all write to a topic of 1.
                replica.min_insync = int(config.get(
                    "min_insync_replicas", min(self.config.min_insync_replicas, len(replicas))))
                self._transition(replica, view.states.get(key))
        for key in [k for k in self.replicas if k[0] not in view.topics]:
            replica = self.replicas.pop(key)
            self._leave_role(replica, NotLeaderError(f"topic {key[0]!r} was deleted"))

    def _transition(self, replica: Replica, state: PartitionState | None) -> None:
        if state is None or state.leader < 0:
            role, leader = OFFLINE, -1
        elif state.leader == self.me:
            # Lead only in the session we were elected in; an older session's state is
            # stale (we restarted or our session expired) until the controller acts.
            role = LEADER if self.session and state.leader_session == self.session else OFFLINE
            leader = self.me
        else:
            role, leader = FOLLOWER, state.leader
        old = replica.state
        if old is not None and state is not None and state.older_than(old):
            return  # a view from before our own ISR write: never go back to it
        same_term = (old is not None and state is not None and role == replica.role
                     and old.leader_epoch == state.leader_epoch and old.leader == state.leader)
        if same_term:
            replica.state = state
            if role == LEADER and replica.tracker is not None \
                    and (state.version, state.created) != (old.version, old.created):
                # The controller may have dropped a dead follower; a newer version also
                # settles an ISR write of ours whose outcome was unknown.
                replica.tracker.adopt(state.isr, state.version)
                self._update_high_watermark(replica)
            return
        self._leave_role(replica, NotLeaderError(
            f"partition {replica.key[0]}-{replica.key[1]} changed leader"))
        replica.state = state
        replica.role = role
        name = f"{replica.key[0]}-{replica.key[1]}"
        if role == LEADER:
            plog = replica.plog
            replica.tracker = LeaderTracker(self.me, replica.replicas, state.isr,
                                            plog.visible_end, time.monotonic())
            if replica.replicated:
                plog.set_high_watermark(replica.tracker.high_watermark)
            log.info("%s: leader in epoch %d, isr %s, log end %d", name, state.leader_epoch,
                     list(state.isr), plog.end_offset)
            self._update_high_watermark(replica)
        elif role == FOLLOWER:
            plog = replica.plog
            mark = plog.visible_end
            replica.reconcile_at = mark if mark < plog.end_offset else None
            replica.retry_at = 0.0
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
                fetcher.start(self._loop or asyncio.get_running_loop())
            fetcher.add(replica)
            log.info("%s: following broker %d in epoch %d from offset %d%s", name, leader,
                     state.leader_epoch, plog.end_offset,
                     f" (comparing from {mark})" if replica.reconcile_at is not None else "")
        elif state is not None and state.leader == self.me:
            log.info("%s: ZooKeeper names this broker leader in an earlier session; waiting "
                     "for the controller to elect again", name)

    def forget(self, key: tuple[str, int]) -> None:
        """Drop a replica whose log is about to be deleted (and its checkpointed mark)."""
        replica = self.replicas.pop(key, None)
        if replica is not None:
            self._leave_role(replica, NotLeaderError(
                f"partition {key[0]}-{key[1]} belongs to a deleted topic"))
        self._checkpoint.pop(partition_dir_name(*key), None)

    def _leave_role(self, replica: Replica, error: LogferryError) -> None:
        if replica.role == LEADER:
            self._fail_acks(replica, error)
            replica.tracker = None
            self.broker.wake_fetchers(replica.key)
        elif replica.role == FOLLOWER and replica.state is not None:
            fetcher = self.fetchers.get(replica.state.leader)
            if fetcher is not None:
                fetcher.remove(replica.key)
        replica.role = OFFLINE

    # -- the leader's side ----------------------------------------------------------

    def leader_log(self, topic: str, partition: int, for_write: bool) -> PartitionLog | None:
        """The log if this broker leads the partition; raises if another one does.

        None when the partition is not replicated here at all (the caller reports
        an unknown topic or partition).
        """
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return None
        if replica.role == LEADER:
            # A partition without other replicas cannot get a second leader (only its
            # one replica may ever lead it), so it keeps taking writes without ZooKeeper.
            if not for_write or not replica.replicated:
                return replica.plog
            if not self.fenced and lease_clock() < self.lease_until:
                return replica.plog
            raise NotLeaderError(f"broker {self.me} cannot confirm with ZooKeeper that it "
                                 f"still leads {topic}-{partition} (connection lost or "
                                 "lease expired); retry")
        state = replica.state
        if state is None or state.leader < 0 or replica.role == OFFLINE:
            raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader right "
                                          "now (election under way or every in-sync replica "
                                          "is down)")
        raise NotLeaderError(f"partition {topic}-{partition} is led by broker {state.leader}, "
                             f"not broker {self.me}")

    def check_acks_all(self, topic: str, partition: int) -> None:
        """Refuse an acks=all produce before appending when too few replicas are in sync."""
        replica = self.replicas[(topic, partition)]
        isr = replica.tracker.isr if replica.tracker is not None else ()
        if len(isr) < replica.min_insync:
            raise NotEnoughReplicasError(
                f"partition {topic}-{partition} has {len(isr)} in-sync replicas {list(isr)}, "
                f"fewer than min_insync_replicas={replica.min_insync}: acks=all is refused "
                "(nothing was written)")

    def wait_for_replicas(self, topic: str, partition: int, end: int, pending: Any,
                          index: int) -> bool:
        """Hold an acks=all answer until the ISR has ``end``; False if it already has."""
        replica = self.replicas[(topic, partition)]
        if self._acked(replica, end):
            return False
        deadline = time.monotonic() + self.config.acks_all_timeout_ms / 1000
        replica.pending_acks.append((end, pending, index, deadline))
        return True

    def _acked(self, replica: Replica, end: int) -> bool:
        return end <= self._acked_end(replica)

    def _acked_end(self, replica: Replica) -> int:
        """Where acks=all answers may be given up to (-1: none, too few in sync)."""
        tracker = replica.tracker
        if tracker is None or len(tracker.isr) < replica.min_insync:
            return -1
        return tracker.replicated_end(replica.plog.end_offset)

    def record_replica_fetch(self, replica: Replica, follower: int, offset: int) -> None:
        """A follower fetched at ``offset``: it has everything below."""
        tracker = replica.tracker
        if tracker is not None and tracker.record_fetch(follower, offset,
                                                        replica.plog.end_offset,
                                                        time.monotonic()):
            self._update_high_watermark(replica)

    def on_flushed(self, key: tuple[str, int]) -> None:
        """The leader's flushed end moved: the high watermark may follow."""
        replica = self.replicas.get(key)
        if replica is not None and replica.tracker is not None and replica.replicated:
            self._update_high_watermark(replica)

    def _update_high_watermark(self, replica: Replica) -> None:
        tracker = replica.tracker
        plog = replica.plog
        if tracker is None:
            return
        if replica.replicated and tracker.advance_high_watermark(plog.end_offset,
                                                                 plog.flushed_end):
            plog.set_high_watermark(tracker.high_watermark)
            self.broker.wake_consumers(replica.key)
        if replica.pending_acks:
            acked_end = self._acked_end(replica)  # once, not per waiting answer
            keep = []
            for item in replica.pending_acks:
                if item[0] <= acked_end:
                    item[1].part_done(item[2])
                else:
                    keep.append(item)
            replica.pending_acks = keep

    def _fail_acks(self, replica: Replica, error: LogferryError) -> None:
        pending, replica.pending_acks = replica.pending_acks, []
        for _, waiting, index, _ in pending:
            waiting.part_done(index, NotEnoughReplicasAfterAppendError(
                f"{error}; the batch was appended by broker {self.me} but not confirmed by "
                "every in-sync replica: it may or may not be kept"))

    def check_replica_fetch(self, topic: str, partition: int, epoch: int) -> Replica:
        """Validate a follower's fetch: we lead the partition in the epoch it names."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.role != LEADER:
            leader = replica.state.leader if replica is not None and replica.state else -1
            raise NotLeaderError(f"broker {self.me} does not lead {topic}-{partition} "
                                 f"(leader: {leader})")
        if epoch != replica.epoch:
            if epoch > replica.epoch:  # a newer leader exists: we are stale, find out now
                self._refresh_state(replica)
            raise StaleEpochError(f"{topic}-{partition}: follower names leader epoch {epoch}, "
                                  f"this leader has epoch {replica.epoch}")
        return replica

    def _refresh_state(self, replica: Replica, settles: LeaderTracker | None = None) -> None:
        """Read the partition's state from ZooKeeper (in the admin pool) and apply it on
        the loop, trying again every 0.5 s while ZooKeeper does not answer.

        ``settles``: the tracker whose failed ISR write this read, made after it,
        settles (a state still at the write's base version means it never happened).
        """
        registry = self.broker.registry
        loop = self._loop
        if registry is None or loop is None or self._stopped.is_set():
            return

        def read() -> None:
            try:
                state = registry.read_state(*replica.key)
            except Exception:
                loop.call_soon_threadsafe(loop.call_later, 0.5, self._refresh_state,
                                          replica, settles)
                return
            loop.call_soon_threadsafe(self._apply_read_state, replica, state, settles)
        loop.run_in_executor(self.broker._admin_pool, read)

    def _apply_read_state(self, replica: Replica, state: PartitionState | None,
                          settles: LeaderTracker | None) -> None:
        if self.replicas.get(replica.key) is not replica or state is None:
            return  # forgotten meanwhile, or the topic is being deleted
        if replica.state is not None and state.older_than(replica.state):
            return  # a newer state was adopted meanwhile (it settled any write too)
        tracker = replica.tracker
        if settles is not None and tracker is settles and state.leader == self.me \
                and state.leader_epoch == replica.epoch:
            replica.state = state
            tracker.adopt(state.isr, state.version, read_after_write=True)
            self._update_high_watermark(replica)
        else:
            self._transition(replica, state)

    # -- ISR upkeep -----------------------------------------------------------------

    async def _upkeep_loop(self) -> None:
        lag = self.config.replica_lag_time_max_ms / 1000
        tick = min(max(lag / 4, 0.05), 0.5)
        next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for replica in list(self.replicas.values()):
                if replica.role != LEADER or replica.tracker is None:
                    continue
                if replica.pending_acks:
                    self._expire_acks(replica, now)
                if not self.fenced:  # (None while an ISR write is out or unsettled)
                    proposed = replica.tracker.proposed_isr(now, lag)
                    if proposed is not None:
                        self._write_isr(replica, proposed)
            if now >= next_checkpoint:
                next_checkpoint = now + CHECKPOINT_INTERVAL_S
                await self._write_checkpoints()

    def _expire_acks(self, replica: Replica, now: float) -> None:
        keep = []
        for item in replica.pending_acks:
            if item[3] <= now:
                isr = list(replica.tracker.isr) if replica.tracker else []
                item[1].part_done(item[2], NotEnoughReplicasAfterAppendError(
                    f"{replica.key[0]}-{replica.key[1]}: the in-sync replicas {isr} did not "
                    f"all confirm the batch within {self.config.acks_all_timeout_ms} ms "
                    f"(min_insync_replicas={replica.min_insync}); it was appended by the "
                    "leader and may or may not be kept"))
            else:
                keep.append(item)
        replica.pending_acks = keep

    def _write_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        state = replica.state
        tracker = replica.tracker
        assert state is not None and tracker is not None and self._loop is not None
        # replace() keeps the leader session and the znode's creation zxid, so a view
        # read before this write is recognised as older (PartitionState.older_than).
        new = replace(state, isr=isr)
        path = zk.partition_state_path(*replica.key)
        client = self.broker._zk
        tracker.begin_write(isr, state.version)  # its members count for acks from now
        old_isr = state.isr

        def write() -> None:
            try:
                stat = client.set(path, new.encode(), version=state.version)
                result: Any = replace(new, version=stat.version)
            except Exception as exc:  # refused, or connection trouble
                result = exc
            self._loop.call_soon_threadsafe(self._isr_written, replica, tracker, old_isr,
                                            result)
        self._loop.run_in_executor(self.broker._admin_pool, write)

    def _isr_written(self, replica: Replica, tracker: LeaderTracker,
                     old_isr: tuple[int, ...], result: Any) -> None:
        name = f"{replica.key[0]}-{replica.key[1]}"
        if replica.tracker is not tracker:
            return  # leadership moved on meanwhile; that tracker is gone
        if isinstance(result, PartitionState):
            if replica.state is None or not result.older_than(replica.state):
                replica.state = result  # (else a newer state, read since, holds it)
                tracker.adopt(result.isr, result.version)
            if len(result.isr) < len(old_isr):
                self.broker.isr_changes[(("direction", "shrink"),)] += 1
                log.warning("%s: isr shrank %s -> %s (followers behind for more than %d ms)",
                            name, list(old_isr), list(result.isr),
                            self.config.replica_lag_time_max_ms)
            else:
                self.broker.isr_changes[(("direction", "grow"),)] += 1
                log.info("%s: isr grew %s -> %s (caught up)", name, list(old_isr),
                         list(result.isr))
            self._update_high_watermark(replica)
        else:
            # Refused (the state changed) or unknown (connection trouble): the proposed
            # members keep counting for acks until a read made after the write settles it.
            if isinstance(result, (BadVersionError, NoNodeError)):
                log.info("%s: isr write lost a race (state changed); reading the state "
                         "again", name)
            else:
                log.warning("%s: could not write the isr to ZooKeeper (%s%s); reading the "
                            "state to learn whether it was written", name,
                            type(result).__name__, f": {result}" if str(result) else "")
            self._refresh_state(replica, settles=tracker)

    # -- ZooKeeper connection fencing -------------------------------------------------

    def _connection_listener(self, state: str) -> bool:
        loop = self._loop
        if loop is None or self._stopped.is_set() or loop.is_closed():
            return True  # kazoo drops a listener that returns True
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            loop.call_soon_threadsafe(self._fence, state)
        elif state == KazooState.CONNECTED:
            loop.call_soon_threadsafe(self._unfence_after_check)
        return False

    def _fence(self, state: str) -> None:
        if not self.fenced:
            leading = sum(1 for r in self.replicas.values() if r.role == LEADER)
            log.warning("ZooKeeper connection %s: refusing writes to the %d partitions this "
                        "broker leads until it can confirm its leadership", state.lower(), leading)
        self.fenced = True
        self._fences += 1

    def _unfence_after_check(self) -> None:
        registry = self.broker.registry
        loop = self._loop
        if registry is None or loop is None:
            return
        keys = [k for k, r in self.replicas.items() if r.role == LEADER]
        fences = self._fences

        def read() -> None:
            try:
                states = {k: registry.read_state(*k) for k in keys}
            except Exception as exc:
                log.warning("could not read partition states after reconnecting: %s", exc)
                return
            loop.call_soon_threadsafe(self._unfence, states, fences)
        loop.run_in_executor(self.broker._admin_pool, read)

    def _unfence(self, states: dict[tuple[str, int], PartitionState | None],
                 fences: int) -> None:
        if fences != self._fences:
            return  # suspended again since the check began: the next reconnect checks anew
        self.session = self.broker.registry.session if self.broker.registry else 0
        for key, state in states.items():
            replica = self.replicas.get(key)
            if replica is not None:
                self._transition(replica, state)
        if self.fenced:
            log.info("ZooKeeper connection back: leadership confirmed, writes accepted again")
        self.fenced = False

    # -- the follower's side (called by the fetchers) -------------------------------

    def fetch_position(self, replica: Replica) -> int:
        """Where the next fetch for ``replica`` starts."""
        return replica.reconcile_at if replica.reconcile_at is not None \
            else replica.plog.end_offset

    def on_fetched(self, replica: Replica, epoch: int, offset: int, result: list,
                   data: memoryview) -> None:
        """Apply one partition's part of a replica fetch response."""
        if replica.role != FOLLOWER or replica.epoch != epoch \
                or self.fetch_position(replica) != offset:
            return  # the role or the log moved on while the fetch was out
        plog = replica.plog
        code, message, start, hw, _, leo = result[2:8]
        now = time.monotonic()
        if code:
            self._fetch_error(replica, offset, code, message, start, leo, now)
            return
        if replica.reconcile_at is not None:
            self._reconcile(replica, offset, data, leo)
            return
        scan = records.scan(data)
        if scan.valid_bytes:
            try:
                plog.append(data[:scan.valid_bytes], scan.messages)
            except StorageError as exc:
                log.error("%s-%d: follower cannot append: %s", *replica.key, exc)
                replica.retry_at = now + 1.0
                return
            self.broker.replicated_in(replica.key, scan.valid_bytes, scan.messages)
        elif scan.error and not scan.error.startswith("torn"):
            log.error("%s-%d: leader sent a bad batch at offset %d (%s); retrying in 1s",
                      *replica.key, offset, scan.error)
            replica.retry_at = now + 1.0
        plog.set_high_watermark(min(hw, plog.end_offset))

    def _fetch_error(self, replica: Replica, offset: int, code: int, message: str,
                     start: int | None, leo: int | None, now: float) -> None:
        from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError
        plog = replica.plog
        name = f"{replica.key[0]}-{replica.key[1]}"
        if code == OffsetOutOfRangeError.code and start is not None and offset < start:
            log.warning("%s: the leader's log starts at %d, past this follower's end %d "
                        "(retention deleted it there): restarting the log empty", name,
                        start, offset)
            plog.restart_at(start)
            replica.reconcile_at = None
        elif code == OffsetOutOfRangeError.code and leo is not None and offset > leo:
            replica.reconcile_at = plog.batch_start_at_or_before(leo)
            log.warning("%s: this follower is ahead of its leader (%d > %d): comparing from "
                        "%d", name, offset, leo, replica.reconcile_at)
        elif code == InvalidOffsetError.code:
            back = plog.batch_start_at_or_before(max(offset - 1, plog.start_offset))
            log.warning("%s: offset %d is no batch boundary on the leader: the logs differ "
                        "before it; comparing from %d", name, offset, back)
            replica.reconcile_at = back if back < offset else None
            if back >= offset:
                plog.truncate_to(back)
        else:
            log.info("%s: fetch from leader failed: %s", name, message)
            replica.retry_at = now + 0.2

    def _reconcile(self, replica: Replica, offset: int, data: memoryview, leo: int) -> None:
        plog = replica.plog
        local = plog.read_bytes(offset, len(data)) if len(data) else b""
        matched, diverged = matching_prefix(data, local)
        at = offset + matched
        if diverged or (not data and leo <= offset) or at >= plog.end_offset:
            replica.reconcile_at = None
            if at < plog.end_offset:
                cut = plog.truncate_to(at)
                self.broker.truncated_bytes[()] += cut
                log.warning("%s-%d: log agrees with the leader up to %d only; cut the %d "
                            "bytes after it that the leader does not have", *replica.key,
                            at, cut)
            else:
                log.info("%s-%d: log agrees with the leader up to %d; fetching from there",
                         *replica.key, at)
        else:
            replica.reconcile_at = at

    # -- reporting --------------------------------------------------------------------

    def under_replicated(self) -> list[tuple[str, int]]:
        """Partitions this broker leads whose ISR is smaller than their replica list."""
        return sorted(k for k, r in self.replicas.items()
                      if r.role == LEADER and r.tracker is not None
                      and len(r.tracker.isr) < len(r.replicas))

    def role_counts(self) -> Counter:
        """Number of hosted partitions per role."""
        return Counter(r.role for r in self.replicas.values())

    async def _write_checkpoints(self) -> None:
        by_dir: dict[Any, dict[str, int]] = {}
        for replica in self.replicas.values():
            if replica.replicated:
                plog = replica.plog
                by_dir.setdefault(plog.directory.parent, {})[plog.name] = plog.visible_end
        loop = asyncio.get_running_loop()
        for log_dir, marks in by_dir.items():
            try:  # disk work: the fsync pool, never behind a ZooKeeper call
                await loop.run_in_executor(self.broker._fsync_pool, write_checkpoint,
                                           log_dir, marks)
            except OSError as exc:
                log.warning("cannot write the high-watermark checkpoint in %s: %s",
                            log_dir, exc)


__all__ = ["FOLLOWER", "LEADER", "OFFLINE", "Replica", "ReplicaManager"]
