"""The leader's right to take writes: fencing on connection trouble, and a lease.

A leader accepts acks 0 and 1 writes only while it can be sure its ZooKeeper session
is alive, because a new leader is elected only after that session expires (acks=all
writes go on meanwhile: they cannot be confirmed by a leader that was replaced, see
:meth:`.leader.LeaderSide.leader_log`):

* while the connection is suspended or lost it refuses those writes (*fenced*,
  :class:`Fencing`); kazoo declares a connection gone after two thirds of the
  session timeout without an answer, and ZooKeeper expires the session only after
  the whole timeout, so the old leader stops before a new one is chosen. Once the
  connection is back, the leader re-reads the state of every partition it leads and
  takes writes again only if that check began after the last suspension;
* a *lease* (:class:`WriteLease`) covers a paused process (SIGSTOP, a VM freeze),
  which sees nothing until it runs again: a heartbeat thread sends ZooKeeper a
  ``sync`` (which must pass through the quorum's leader) every quarter of the
  session timeout, and writes are accepted only until three quarters of the timeout
  after the last heartbeat that was answered was sent. A leader resumed after its
  session expired finds its lease run out before it can take a single write.

A partition with a single replica cannot get a second leader, so it keeps taking
writes either way (see :meth:`.manager.ReplicaManager.leader_log`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Protocol

from kazoo.client import KazooState

from broker.coordination import zk
from broker.coordination.partition_state import PartitionState
from broker.replication.roles import LEADER, Replica
from broker.replication.services import PartitionKey, ReplicationServices

log = logging.getLogger("logferry.replication")

_LEASE_CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def lease_clock() -> float:
    """Seconds on the clock the write lease runs on: CLOCK_BOOTTIME where there is one
    (Linux), which goes on counting while the machine is suspended, where the
    monotonic clock stops; ZooKeeper's session clock does not stop either."""
    return time.clock_gettime(_LEASE_CLOCK_ID)


class WriteLease:
    """The heartbeat that proves, again and again, that the session is alive."""

    def __init__(self, services: ReplicationServices, stopped: threading.Event):
        self.services = services
        self._stopped = stopped
        self.until = 0.0
        """Writes are accepted until this :func:`lease_clock` time (renewed by the
        heartbeat thread)."""

    def start(self) -> None:
        """Start the heartbeat thread (it ends when ``stopped`` is set)."""
        threading.Thread(target=self._heartbeat, name="zk-lease", daemon=True).start()

    def valid(self) -> bool:
        """True while the lease runs."""
        return lease_clock() < self.until

    def session_timeout(self) -> float:
        """The session timeout the lease is measured against: the configured one, or
        the one ZooKeeper granted if that is shorter (the server clamps requests to its
        own bounds, and it is the granted one after which a new leader can be elected)."""
        configured = self.services.config.zk_session_timeout_s
        granted = zk.granted_session_timeout(self.services.zk)
        return configured if granted is None else min(configured, granted)

    def _heartbeat(self) -> None:
        """Renew the write lease: each answered ``sync`` proves the session was alive
        when it was sent (see the module docstring). A sync, not a read: a ZooKeeper
        server cut off from its quorum still answers reads for a while, but a sync must
        pass through the quorum's leader, which is what keeps the session alive."""
        client = self.services.zk
        assert client is not None  # started once connected
        while not self._stopped.is_set():
            session = self.session_timeout()
            sent = lease_clock()
            try:
                client.sync("/")
                self.until = sent + session * 0.75
            except Exception:
                pass  # no answer, no renewal
            self._stopped.wait(max(session / 4 - (lease_clock() - sent), 0.01))


class FencingHost(Protocol):
    """What :class:`Fencing` needs from the replica manager."""

    services: ReplicationServices
    loop: asyncio.AbstractEventLoop | None
    stopped: threading.Event

    @property
    def replicas(self) -> Mapping[PartitionKey, Replica]: ...

    def reconfirm(self, states: Mapping[PartitionKey, PartitionState | None]) -> None:
        """Take up the roles of freshly read states after a reconnect."""


class Fencing:
    """Refuses writes while the ZooKeeper connection is in doubt (loop thread, except
    :meth:`listener`, which kazoo calls from its own thread)."""

    def __init__(self, host: FencingHost):
        self.host = host
        self.fenced = False
        self._fences = 0
        """How often the connection was suspended or lost: an unfence decided on a
        check that began before a newer fence must not undo it."""

    def listener(self, state: str) -> bool:
        """kazoo's connection state listener."""
        loop = self.host.loop
        if loop is None or self.host.stopped.is_set() or loop.is_closed():
            return True  # kazoo drops a listener that returns True
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            loop.call_soon_threadsafe(self.fence, state)
        elif state == KazooState.CONNECTED:
            loop.call_soon_threadsafe(self.unfence_after_check)
        return False

    def fence(self, state: str) -> None:
        """The connection is suspended or lost: refuse writes from now on."""
        if not self.fenced:
            leading = sum(1 for r in self.host.replicas.values() if r.role == LEADER)
            log.warning(
                "ZooKeeper connection %s: refusing acks 0 and 1 writes to the %d "
                "partitions this broker leads until it can confirm its leadership "
                "(acks=all writes go on: they need every in-sync replica, and the ISR "
                "changes only through ZooKeeper)",
                state.lower(),
                leading,
            )
        self.fenced = True
        self._fences += 1

    def unfence_after_check(self) -> None:
        """The connection is back: read the led partitions' states (in the admin pool),
        then take writes again unless the connection was lost meanwhile."""
        registry = self.host.services.registry
        loop = self.host.loop
        if registry is None or loop is None:
            return
        keys = [k for k, r in self.host.replicas.items() if r.role == LEADER]
        fences = self._fences

        def read() -> None:
            try:
                states = {k: registry.read_state(*k) for k in keys}
            except Exception as exc:
                log.warning("could not read partition states after reconnecting: %s", exc)
                return
            loop.call_soon_threadsafe(self._unfence, states, fences)

        loop.run_in_executor(self.host.services.admin_pool, read)

    def _unfence(self, states: dict[PartitionKey, PartitionState | None], fences: int) -> None:
        if fences != self._fences:
            return  # suspended again since the check began: the next reconnect checks anew
        self.host.reconfirm(states)
        if self.fenced:
            log_reconfirmed(states, self.host.replicas)
        self.fenced = False


def log_reconfirmed(
    states: Mapping[PartitionKey, PartitionState | None], replicas: Mapping[PartitionKey, Replica]
) -> None:
    """Say what the check after a reconnect found for the partitions it checked (those
    the broker led): which it still leads, and which not. A reconnect after an expired
    session finds none (the states name the old session, or another leader): saying
    "leadership confirmed" then, as it once did, told operators the opposite of the truth."""
    kept = sorted(k for k in states if (r := replicas.get(k)) is not None and r.role == LEADER)
    lost = sorted(k for k in states if k not in kept)
    if kept:
        log.info(
            "ZooKeeper connection back: still leading %s; writes to them accepted again",
            _names(kept),
        )
    if lost:
        log.warning(
            "ZooKeeper connection back, but this broker no longer leads %s (another leader "
            "was elected, or its session expired and the controller must elect again)",
            _names(lost),
        )
    if not states:
        log.info("ZooKeeper connection back (this broker led no partition)")


def _names(keys: list[PartitionKey], most: int = 5) -> str:
    """``t-0, t-1 and 3 more``: partitions for a log line, at most ``most`` named."""
    shown = ", ".join(f"{t}-{p}" for t, p in keys[:most])
    return shown if len(keys) <= most else f"{shown} and {len(keys) - most} more"


__all__ = ["Fencing", "FencingHost", "WriteLease", "lease_clock"]
