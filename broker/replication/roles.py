"""A broker's replica of one partition and which role it plays (sans IO).

Every hosted partition is in one of three roles, decided from its state in
ZooKeeper (see :mod:`.state`):

* **leader**: the state names this broker *and its current session* as leader;
* **follower**: another broker leads;
* **offline**: no leader, or a state that names this broker in an older session
  (before a restart or a session expiry): wait for the controller.

The decision is kept here, apart from the IO of taking up a role
(:mod:`.manager`), so it can be read and tested on its own.
"""

from __future__ import annotations

from typing import Any

from broker.coordination.partition_state import PartitionState
from broker.replication.isr import LeaderTracker
from broker.storage.partition_log import PartitionLog

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"


class AnswerSpan:
    """The acks=all writes a broker answered as leader of a partition in one epoch
    (:func:`.acks.answered`)."""

    __slots__ = ("count", "epoch", "first", "last")

    def __init__(self, epoch: int, first: float):
        self.epoch = epoch
        self.first = first
        """``time.time()`` of the first answer."""
        self.last = first
        """``time.time()`` of the latest answer."""
        self.count = 0


class Replica:
    """This broker's replica of one partition and its current role."""

    __slots__ = (
        "answered",
        "key",
        "leader_end",
        "min_insync",
        "pending_acks",
        "plog",
        "reconcile_at",
        "replicas",
        "retry_at",
        "role",
        "state",
        "throttle",
        "tracker",
    )

    def __init__(self, key: tuple[str, int], plog: PartitionLog):
        self.key = key
        self.plog = plog
        self.replicas: list[int] = []
        self.state: PartitionState | None = None
        self.role = OFFLINE
        self.tracker: LeaderTracker | None = None
        self.pending_acks: list[tuple[int, Any, int, float]] = []
        """acks=all answers waiting: (end offset, pending produce, part index, deadline)."""
        self.min_insync = 1
        self.reconcile_at: int | None = None
        self.retry_at = 0.0
        self.leader_end = 0
        """The leader's log end as of the last fetch (progress of a throttled copy)."""
        self.throttle = 0
        """Bytes/s this follower's fetches are limited to (a reassignment added it); 0: none."""
        self.answered: AnswerSpan | None = None
        """The acks=all answers given as leader in the current epoch (None: none yet)."""

    @property
    def epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def replicated(self) -> bool:
        return len(self.replicas) > 1


def role_for(state: PartitionState | None, me: int, session: int) -> tuple[str, int]:
    """The role this broker (``me``, registered in ``session``) takes under ``state``,
    and the leader it implies (-1: none)."""
    if state is None or state.leader < 0:
        return OFFLINE, -1
    if state.leader == me:
        # Lead only in the session we were elected in; an older session's state is
        # stale (we restarted or our session expired) until the controller acts.
        return (LEADER if session and state.leader_session == session else OFFLINE), me
    return FOLLOWER, state.leader


def same_term(replica: Replica, state: PartitionState | None, role: str) -> bool:
    """True when ``state`` keeps ``replica`` in its role under the same leader and
    epoch (only the ISR or the znode version may differ)."""
    old = replica.state
    return (
        old is not None
        and state is not None
        and role == replica.role
        and old.leader_epoch == state.leader_epoch
        and old.leader == state.leader
    )


__all__ = ["FOLLOWER", "LEADER", "OFFLINE", "AnswerSpan", "Replica", "role_for", "same_term"]
