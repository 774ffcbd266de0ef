"""Group coordination over ZooKeeper: registration, rebalancing, ownership, commits.

The paper's distributed consumption (section 3.2) as a state machine run by one
coordinator thread per member. Every member watches the group's member registry, the
broker registry and the topics it subscribes to; any change makes every member
recompute the assignment (:mod:`broker.client.group.assignment`, a pure function of what
ZooKeeper holds), release what it lost and claim what it gained. Ownership is an
ephemeral znode per partition: a member fetches a partition only while it holds that
znode, and deletes it only after its last commit, so two members never consume a
partition at once and a handover repeats nothing.

States (``Coordinator.state``, in ``GroupConsumer.metrics()["state"]``)::

                 start
                   |
                   v
   +-------> REGISTERING --(ids/<id> created)--+
   |                                           v
   |        +-----------------------------> REBALANCING <--+-- watch fired (members,
   |        | newer event while claiming:     |            |   brokers, topics), after
   |        | restart the cycle               |            |   a short debounce
   |        +---------------------------------+            |
   |                                          | every target partition owned
   |                                          v            |
   |                                       STABLE ---------+
   |
   |   any state --(connection lost)--> SUSPENDED: fetching and delivery paused,
   |                                    ownership and queued batches kept
   |        SUSPENDED --(same session back)--> REBALANCING (a cheap re-check)
   |        SUSPENDED --(session expired)----> LOST: every partition and queued batch
   +--------------------------------------------- dropped; when CONNECTED, register again
                                         close() --> CLOSED

One REBALANCING cycle:

1. read the members (with subscriptions), the topic list and the subscribed topics'
   partitions, re-arming one-shot watches on each (a change between two reads shows
   up in the next read, so none is missed);
2. compute the group's assignment and this member's share;
3. revoke what it lost: stop fetching and delivering, drop queued batches, wait up to
   ``release_timeout`` for in-flight fetches and for the application to acknowledge
   a message it holds, commit, then delete the owner znodes;
4. restart locally the partitions that only move between this member's streams;
5. claim what it gained: create each owner znode; while an old owner still holds
   one, wait with exponential backoff and jitter (woken at once by a watch on that
   znode) and never give up: a member that stops retrying leaves partitions unowned,
   a known failure of the paper-era consumers. Only a newer event interrupts the
   wait, and then the whole cycle restarts from step 1 with fresh data. Partitions
   are handed to the fetcher as soon as they are claimed.

Events arrive from kazoo's threads and are only recorded; the coordinator thread does
all ZooKeeper work, so the cycle is strictly sequential. Events within ``debounce``
seconds of each other (bounded by ``debounce_max``) make one cycle, which keeps a
storm of joins from causing a storm of rebalances.

Commits write ``(offset, skip)`` for owned partitions whose position moved. They are
queued to kazoo under the consumer's lock after checking that the session that
claimed the partition is still the current one; the LOST listener takes the same lock
before kazoo fails queued requests, so no commit of a lost partition can reach
ZooKeeper through a new session and overwrite the new owner's offsets.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypedDict

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from broker.client.group import offsets as reg
from broker.client.group.access import refusal
from broker.client.group.assignment import (
    Subscription,
    TopicPartition,
    assign,
    diff,
    group_strategy,
    member_share,
    resolve_subscription,
)
from broker.client.group.fetcher import Fetcher
from broker.client.group.offsets import Committed
from broker.client.group.streams import GroupState, PartitionState, StreamQueue
from broker.common.acl import Operation
from broker.common.errors import ZooKeeperError
from broker.common.retry import Retry
from broker.coordination import zk

log = logging.getLogger("logferry.group")


class MemberState(str, enum.Enum):  # noqa: UP042 - StrEnum's str() and format() are the value, not Class.NAME
    """Where a member stands (see the module docstring)."""

    REGISTERING = "REGISTERING"
    REBALANCING = "REBALANCING"
    STABLE = "STABLE"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"
    CLOSED = "CLOSED"


TRIGGERS = frozenset({"members", "topics", "brokers", "connected", "retry", "register", "start"})
"""Events that start (or restart) a rebalance cycle."""
STOPS = frozenset({"close", "lost", "suspended"})
"""Events that interrupt whatever the coordinator waits for."""


class RebalanceStats(TypedDict):
    """A member's rebalance counters (a plain dict; ``GroupConsumer.metrics`` merges it in)."""

    rebalances: int
    last_rebalance_ms: float | None
    """Duration of the last completed rebalance."""
    rebalance_ms: list[float]
    """Durations of the last 20 rebalances, oldest first."""
    claim_retries: int
    sessions_lost: int
    commits: int
    commit_failures: int
    partitions_revoked: int
    partitions_gained: int


class _Restart(Exception):
    """A newer event (or the session's end) interrupts the cycle."""


def connect(connect_string: str, session_timeout: float, timeout: float = zk.CONNECT_TIMEOUT_S) -> KazooClient:
    """A started kazoo client for one member of a group of an existing cluster."""
    return zk.connect(connect_string, create=False, timeout=timeout, session_timeout=session_timeout)


class Coordinator:
    """One member's registration, rebalancing and commits (module docstring)."""

    def __init__(
        self,
        *,
        client: KazooClient,
        group: str,
        consumer_id: str,
        subscription: Subscription,
        start: str,
        strategy: str,
        state: GroupState,
        fetcher: Fetcher,
        stream_for: Callable[[str, int], StreamQueue],
        max_bytes: int,
        session_timeout: float,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        debounce: float = 0.1,
        debounce_max: float = 1.0,
        release_timeout: float = 2.0,
    ):
        self.zk = client
        self.group = group
        self.consumer_id = consumer_id
        self.subscription = subscription
        self.start_policy = start
        self.strategy = strategy
        self.state = state
        self.fetcher = fetcher
        self.stream_for = stream_for
        self.max_bytes = max_bytes
        self.session_timeout = session_timeout
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.debounce = debounce
        self.debounce_max = debounce_max
        self.release_timeout = release_timeout
        self.member_state = MemberState.REGISTERING
        self.waiting_for: dict[TopicPartition, str] = {}
        """Partitions this member should own but another still holds: ``{tp: owner}``."""
        self.stats: RebalanceStats = {
            "rebalances": 0,
            "last_rebalance_ms": None,
            "rebalance_ms": [],
            "claim_retries": 0,
            "sessions_lost": 0,
            "commits": 0,
            "commit_failures": 0,
            "partitions_revoked": 0,
            "partitions_gained": 0,
        }
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._trigger_at: float | None = None
        self._last_event_at = 0.0
        self._retry_at: float | None = None
        self._retry_backoff = Retry(initial=0.2, maximum=5.0, jitter=0.5)
        self._need_register = True
        self._lost: list[PartitionState] = []
        self._commit_lock = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"logferry-group-{group}", daemon=True)
        self.zk.add_listener(self._on_session)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._post("start")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the coordinator thread (it finishes the ZooKeeper call it is in)."""
        self._closing = True
        self._post("close")
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def leave(self) -> None:
        """Commit, release every partition and deregister, in that order (after stop)."""
        state = self.state
        with state.lock:
            states = list(state.partitions.values())
            state.stop(states)
            for ps in states:
                ps.epoch = 0  # positions are final
        tps = sorted(ps.tp for ps in states)
        connected = self.zk.state == KazooState.CONNECTED
        if tps:
            self._call_hook(self.on_revoke, tps)
        try:
            if connected:
                self._commit_states(states)
                self._delete_owners(states, also=[reg.member_path(self.group, self.consumer_id)])
            else:
                log.warning(
                    "group %s: closing without ZooKeeper; %d partitions are released when the session times out",
                    self.group,
                    len(tps),
                )
        except KazooException as exc:
            log.warning("group %s: could not release cleanly (%s); the session timeout will", self.group, exc)
        finally:
            with state.lock:
                state.release(states)
            self.member_state = MemberState.CLOSED
            self.zk.remove_listener(self._on_session)
            zk.close(self.zk)
        if tps:
            log.info("group %s: %s left, released %d partitions", self.group, self.consumer_id, len(tps))

    # -- events ----------------------------------------------------------------------------

    def _post(self, kind: str) -> None:
        with self._cond:
            self._pending.add(kind)
            if kind in TRIGGERS:
                now = time.monotonic()
                self._last_event_at = now
                if self._trigger_at is None:
                    self._trigger_at = now
            self._cond.notify_all()

    def _on_session(self, session_state: KazooState) -> None:
        # kazoo's connection thread: record, adjust delivery, return quickly.
        state = self.state
        if session_state == KazooState.SUSPENDED:
            with state.lock:
                state.paused = True
                state.invalidate_readers()
            log.warning("group %s: ZooKeeper connection lost; fetching paused, ownership kept", self.group)
            self._post("suspended")
        elif session_state == KazooState.LOST:
            with state.lock:
                dropped = state.drop_everything()
                state.paused = True
                state.invalidate_readers()
            with self._cond:
                self._lost.extend(dropped)
            self._post("lost")
        else:
            with state.lock:
                state.paused = False
                state.invalidate_readers()
                state.data_ready.notify_all()
                state.fetch_wake.notify_all()
            self._post("connected")

    def _on_members(self, _event: object) -> None:
        self._post("members")

    def _on_topics(self, _event: object) -> None:
        self._post("topics")

    def _on_brokers(self, _event: object) -> None:
        self._post("brokers")

    def _on_owner(self, _event: object) -> None:
        self._post("owner")

    def _take(self, kinds: Iterable[str]) -> None:
        with self._cond:
            self._pending.difference_update(kinds)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            log.exception("group %s: coordinator thread died", self.group)
            self.state.fail(exc)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    timeout = None
                    if self._retry_at is not None:
                        timeout = self._retry_at - time.monotonic()
                        if timeout <= 0:
                            self._retry_at = None
                            self._pending.add("retry")
                            self._trigger_at = self._trigger_at or time.monotonic()
                            break
                    self._cond.wait(timeout)
                pending = set(self._pending)
            if "close" in pending or self._closing:
                return
            if "lost" in pending:
                self._take({"lost"})
                self._handle_lost()
            if self.zk.state != KazooState.CONNECTED:
                with self._cond:
                    # What happened meanwhile is re-read once connected ("connected" is a
                    # trigger); the outage is not part of that rebalance's duration.
                    self._pending.difference_update(pending - {"close", "lost"})
                    self._trigger_at = None
                if self.member_state != MemberState.LOST:
                    self._set_state(MemberState.SUSPENDED)
                continue
            self._take({"suspended", "owner"})
            if "brokers" in pending:
                self.fetcher.refresh_metadata()
            if not pending & TRIGGERS and not self._need_register:
                continue
            try:
                if self._need_register:
                    self._set_state(MemberState.REGISTERING)
                    self._register()
                self._debounce()
                self._cycle()
                self._retry_backoff.reset()
            except _Restart:
                continue
            except NoAuthError:
                # the group's ACL changed under a running member: it may no longer consume
                self.state.fail(
                    refusal(self.zk, self.group, Operation.CONSUME, "ZooKeeper refused its registration or ownership")
                )
                return
            except KazooException as exc:
                delay = self._retry_backoff.next_delay()
                log.warning(
                    "group %s: rebalance interrupted by ZooKeeper (%r); retrying in %.1fs", self.group, exc, delay
                )
                self._retry_at = time.monotonic() + delay

    def _set_state(self, new: MemberState) -> None:
        if new != self.member_state:
            log.debug("group %s: %s -> %s", self.group, self.member_state.value, new.value)
            self.member_state = new

    def _handle_lost(self) -> None:
        with self._cond:
            dropped, self._lost = self._lost, []
        self.stats["sessions_lost"] += 1
        self._need_register = True
        self.waiting_for = {}
        self._set_state(MemberState.LOST)
        tps = sorted(ps.tp for ps in dropped)
        log.warning(
            "group %s: ZooKeeper session expired; dropped %d partitions and their queued batches, rejoining",
            self.group,
            len(tps),
        )
        if tps:
            self._call_hook(self.on_revoke, tps)

    def _wait_event(self, timeout: float, interrupt: frozenset[str] = TRIGGERS | STOPS) -> None:
        """Sleep up to ``timeout``; raise _Restart on an ``interrupt`` event, return on owner."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._pending & interrupt:
                    raise _Restart()
                if "owner" in self._pending:
                    self._pending.discard("owner")
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def _debounce(self) -> None:
        """Let a burst of events settle (quiet for ``debounce``, at most ``debounce_max``)."""
        with self._cond:
            first = self._trigger_at or time.monotonic()
            while True:
                if self._pending & STOPS:
                    raise _Restart()
                now = time.monotonic()
                wake = min(self._last_event_at + self.debounce, first + self.debounce_max)
                if now >= wake:
                    break
                self._cond.wait(wake - now)
            self._pending.difference_update(TRIGGERS)

    # -- registration --------------------------------------------------------------------------

    def registration(self) -> dict[str, object]:
        """What this member writes into its ``ids`` znode."""
        return {
            "version": 1,
            **self.subscription.to_json(),
            "start": self.start_policy,
            "strategy": self.strategy,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(time.time() * 1000),
        }

    def _register(self) -> None:
        path = reg.member_path(self.group, self.consumer_id)
        data = zk.encode(self.registration())
        backoff = Retry(initial=0.1, maximum=2.0, jitter=0.5)
        warned = 0.0
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path, watch=self._on_owner)
                except NoNodeError:
                    continue
                session = self.zk.client_id
                if session is not None and stat.ephemeralOwner == session[0]:
                    break
                if time.monotonic() - warned > 5:
                    warned = time.monotonic()
                    log.warning(
                        "group %s: consumer id %s is registered by another session (an "
                        "earlier run not yet timed out, or a duplicate id); waiting",
                        self.group,
                        self.consumer_id,
                    )
                # Rebalance triggers stay pending for the cycle after registration.
                self._wait_event(backoff.next_delay(), interrupt=STOPS)
        self._need_register = False
        log.info(
            "group %s: registered %s (%s)",
            self.group,
            self.consumer_id,
            self.subscription.pattern or sorted((self.subscription.topics or {}).items()),
        )

    # -- one rebalance cycle ---------------------------------------------------------------------

    def _read_target(self) -> dict[TopicPartition, int] | None:
        """This member's share of the current assignment; None if it is not registered."""
        client = self.zk
        members = reg.read_members(client, self.group, watch=self._on_members)
        topics = client.get_children(zk.BROKER_TOPICS, watch=self._on_topics)
        client.get_children(zk.BROKER_IDS, watch=self._on_brokers)
        if self.consumer_id not in members:
            return None
        subscriptions = {
            cid: resolve_subscription(Subscription.from_json(m.data), topics) for cid, m in members.items()
        }
        wanted = sorted({t for s in subscriptions.values() for t in s})
        asyncs = [(t, client.get_async(zk.topic_path(t), watch=self._on_topics)) for t in wanted]
        partitions: dict[str, list[int]] = {}
        for topic, result in asyncs:
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue
            partitions[topic] = sorted(zk.read_assignment(raw))
        strategies = {cid: str(m.data.get("strategy", "range")) for cid, m in members.items()}
        strategy = group_strategy(strategies)
        if strategy != self.strategy:
            log.warning(
                "group %s: members disagree on the assignment strategy; using %r, the first member's",
                self.group,
                strategy,
            )
        result = assign(strategy, partitions, subscriptions)
        return member_share(result, self.consumer_id)

    def _cycle(self) -> None:
        self._set_state(MemberState.REBALANCING)
        target = self._read_target()
        if target is None:
            log.warning(
                "group %s: %s is not registered (deleted by hand?); registering again", self.group, self.consumer_id
            )
            self._need_register = True
            self._post("register")
            raise _Restart()
        with self.state.lock:
            generation = self.state.generation
            current = {tp: (ps.stream_index if ps.active else -1) for tp, ps in self.state.partitions.items()}
        changes = diff(current, target)
        if changes.revoked:
            self._release(changes.revoked)
        if changes.moved:
            self._restart_moved(changes.moved, target)
        self._claim(changes.gained, target, generation)
        self.waiting_for = {}
        self._set_state(MemberState.STABLE)
        with self._cond:
            started = self._trigger_at
            # Events that came in during this cycle start the clock of the next one.
            self._trigger_at = time.monotonic() if self._pending & TRIGGERS else None
        elapsed_ms = (time.monotonic() - (started or time.monotonic())) * 1000
        self.stats["rebalances"] += 1
        self.stats["last_rebalance_ms"] = round(elapsed_ms, 1)
        self.stats["rebalance_ms"] = (self.stats["rebalance_ms"] + [round(elapsed_ms, 1)])[-20:]
        self.stats["partitions_revoked"] += len(changes.revoked)
        self.stats["partitions_gained"] += len(changes.gained)
        if changes.revoked or changes.gained or changes.moved:
            log.info(
                "group %s: %s rebalanced in %.0f ms: owns %d partitions (-%d +%d, %d moved)",
                self.group,
                self.consumer_id,
                elapsed_ms,
                len(target),
                len(changes.revoked),
                len(changes.gained),
                len(changes.moved),
            )

    def _release(self, tps: list[TopicPartition]) -> None:
        state = self.state
        with state.lock:
            states = [state.partitions[tp] for tp in tps if tp in state.partitions]
            state.stop(states)
        if not state.wait_idle(states, self.release_timeout):
            log.warning(
                "group %s: %s not acknowledged or still being fetched after %.1fs; "
                "releasing anyway (the next owner may deliver the held message again)",
                self.group,
                [f"{t}-{p}" for t, p in tps],
                self.release_timeout,
            )
        with state.lock:
            for ps in states:
                ps.epoch = 0  # positions are final: later acknowledgements are ignored
        self._call_hook(self.on_revoke, sorted(tps))
        self._commit_states(states, strict=True)
        self._delete_owners(states)
        with state.lock:
            state.release(states)

    def _restart_moved(self, tps: list[TopicPartition], target: dict[TopicPartition, int]) -> None:
        state = self.state
        with state.lock:
            states = [state.partitions[tp] for tp in tps if tp in state.partitions]
            state.stop(states)
        state.wait_idle(states, self.release_timeout)
        with state.lock:
            for ps in states:
                self.start_partition(ps, target[ps.tp], ps.committed if ps.position is None else ps.position)
            state.fetch_wake.notify_all()

    def start_partition(self, ps: PartitionState, stream_index: int, position: tuple[int, int] | None) -> None:
        """(Re)start fetching ``ps`` from ``position`` on its stream (lock held)."""
        ps.epoch = self.state.next_epoch()
        ps.stream_index = stream_index
        ps.stream = self.stream_for(ps.topic, stream_index)
        ps.position = position
        ps.fetch_offset = position[0] if position is not None else None
        ps.skip_at = position if position is not None and position[1] else None
        ps.failures = 0
        ps.retry_at = 0.0
        ps.active = True

    def _claim(self, tps: list[TopicPartition], target: dict[TopicPartition, int], generation: int) -> None:
        pending = list(tps)
        backoff = Retry(initial=0.05, maximum=2.0, jitter=0.5)  # members claiming one znode spread out
        since = time.monotonic()
        logged = since
        while pending:
            claimed = []
            for tp in pending:
                owner = self._try_claim(tp)
                if owner is None:
                    claimed.append(tp)
                    self.waiting_for.pop(tp, None)
                else:
                    self.waiting_for[tp] = owner
            if claimed:
                self._activate(claimed, target, generation)
                pending = [tp for tp in pending if tp not in set(claimed)]
            if not pending:
                return
            now = time.monotonic()
            if now - logged > 5:
                logged = now
                log.warning(
                    "group %s: still waiting after %.0fs for %s to be released",
                    self.group,
                    now - since,
                    ", ".join(f"{t}-{p} (held by {self.waiting_for.get((t, p))})" for t, p in pending[:8]),
                )
            self.stats["claim_retries"] += 1
            self._wait_event(backoff.next_delay())

    def _try_claim(self, tp: TopicPartition) -> str | None:
        """Create the owner znode; None on success, else the current owner's id."""
        path = reg.owner_path(self.group, *tp)
        mine = self.consumer_id.encode()
        for _ in range(3):
            try:
                self.zk.create(path, mine, ephemeral=True, makepath=True)
                return None
            except NodeExistsError:
                try:
                    raw, stat = self.zk.get(path, watch=self._on_owner)
                except NoNodeError:
                    continue  # released just now: try again at once
                session = self.zk.client_id
                if raw == mine and session is not None and stat.ephemeralOwner == session[0]:
                    return None  # ours already (a create retried after a connection loss)
                return (raw or b"?").decode("utf-8", "replace")
        return "?"

    def _activate(self, tps: list[TopicPartition], target: dict[TopicPartition, int], generation: int) -> None:
        """Read committed offsets of freshly claimed partitions and start fetching them."""
        asyncs = [(tp, self.zk.get_async(reg.offset_path(self.group, *tp))) for tp in tps]
        committed: dict[TopicPartition, Committed | None] = {}
        for tp, result in asyncs:
            try:
                raw, _ = result.get()
                committed[tp] = Committed.decode(raw)
            except NoNodeError:
                committed[tp] = None
        # The hook runs before the first message is fetched (and after the znode exists).
        self._call_hook(self.on_assign, sorted(tps))
        state = self.state
        with state.lock:
            lost = state.generation != generation
            for tp in tps if not lost else ():
                ps = PartitionState(
                    tp[0], tp[1], self.stream_for(tp[0], target[tp]), target[tp], 0, generation, self.max_bytes
                )
                c = committed[tp]
                position = (c.offset, c.skip) if c is not None else None
                ps.committed = position
                self.start_partition(ps, target[tp], position)
                state.partitions[tp] = ps
            state.fetch_wake.notify_all()
        if lost:  # the session that claimed them is gone, and so are the znodes
            self._call_hook(self.on_revoke, sorted(tps))
            raise _Restart()

    def _delete_owners(self, states: list[PartitionState], also: Iterable[str] = ()) -> None:
        paths = [reg.owner_path(self.group, ps.topic, ps.partition) for ps in states] + list(also)
        asyncs = [(path, self.zk.delete_async(path)) for path in paths]
        for path, result in asyncs:
            try:
                result.get()
            except NoNodeError:
                log.debug("group %s: %s was already gone", self.group, path)

    # -- commits ---------------------------------------------------------------------------------

    def commit(self) -> int:
        """Commit the positions of every owned partition that moved; returns how many.

        Raises ZooKeeperError when ZooKeeper is unreachable (positions are kept and the
        next commit writes them).
        """
        with self.state.lock:
            states = list(self.state.partitions.values())
        if self.zk.state != KazooState.CONNECTED:
            raise ZooKeeperError(
                "not connected to ZooKeeper; positions are kept and committed once the connection is back"
            )
        try:
            return self._commit_states(states)
        except NoAuthError:
            raise refusal(self.zk, self.group, Operation.CONSUME, "ZooKeeper refused the commit") from None
        except KazooException as exc:
            raise ZooKeeperError(f"commit failed: {exc!r}") from None

    def _commit_states(self, states: list[PartitionState], strict: bool = False) -> int:
        """Write moved positions of ``states`` if their claiming session is current.

        With ``strict`` a failed write raises (a release must not delete the owner znode
        of a partition whose position is not stored); otherwise it is logged and left
        for the next commit.
        """
        state = self.state
        with self._commit_lock:
            with state.lock:
                state.materialize()
                todo = [
                    (ps, ps.position)
                    for ps in states
                    if ps.position is not None and ps.position != ps.committed and ps.generation == state.generation
                ]
                # Queued to kazoo under the lock: see the module docstring.
                asyncs = []
                for ps, pos in todo:
                    record = Committed.now(*pos)
                    path = reg.offset_path(self.group, ps.topic, ps.partition)
                    asyncs.append((ps, pos, record, self.zk.set_async(path, record.encode())))
            written = 0
            for ps, pos, record, result in asyncs:
                try:
                    try:
                        result.get(timeout=self.session_timeout)
                    except NoNodeError:
                        with state.lock:
                            if ps.generation != state.generation:
                                continue
                            retry = self.zk.create_async(
                                reg.offset_path(self.group, ps.topic, ps.partition), record.encode(), makepath=True
                            )
                        retry.get(timeout=self.session_timeout)
                except (KazooException, KazooTimeoutError) as exc:
                    self.stats["commit_failures"] += 1
                    if strict or isinstance(exc, NoAuthError):
                        raise  # a refusal is not retried: commit() names it
                    log.warning("group %s: commit of %s-%d failed: %r", self.group, ps.topic, ps.partition, exc)
                    continue
                with state.lock:
                    ps.committed = pos
                written += 1
            self.stats["commits"] += 1 if written else 0
            return written

    # -- introspection -----------------------------------------------------------------------------

    def _call_hook(self, hook: Callable[[list[TopicPartition]], None] | None, tps: list[TopicPartition]) -> None:
        if hook is None or not tps:
            return
        try:
            hook(tps)
        except Exception:
            log.exception("group %s: rebalance callback %r failed", self.group, hook)


__all__ = ["Coordinator", "MemberState", "RebalanceStats", "connect"]
