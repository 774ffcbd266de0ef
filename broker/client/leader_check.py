"""Requests waiting on a broker that no longer leads their partitions: give them up.

A produce request goes to the leader the metadata named when it was sent. If that
leader is cut off (its cable pulled, its process frozen), the request gets no answer:
TCP retransmits with a growing backoff, and the producer's own bound is its
``request_timeout`` (30 s). Meanwhile, once the old leader's ZooKeeper session has
expired, the controller elects another leader, and the partition could take writes
again; but it has one request in flight per partition, the unanswered one, so it waits.
The nemesis that isolates a leader for 10-16 s measured that wait: its partition
acknowledged nothing for 13-28 s (docs/guarantees.md).

The rule, as Kafka's clients apply it on a leader change: a request unanswered for
more than :data:`CHECK_AFTER_S` has its partitions' leaders looked up again (a metadata
request from a thread of its own, to a broker other than those the waiting requests
went to, one look-up at a time, at most every :data:`CHECK_EVERY_S`). Where the
metadata now names a leader at another address, the connection the request went out
on is closed: every request pending on it fails with ``BrokerNotAvailableError`` and
the sender retries their batches where the metadata now points. Closing is the one way
to abandon a request (a connection has no other), and it is what ``request_timeout``
does, only sooner: a connection whose requests go unanswered while the cluster has
moved on is most likely dead, and any other request on it is simply retried (on the
same broker, over a new connection, if it still leads).

The retry is safe with idempotence (the same bytes, producer id and sequence: a new
leader that already copied the batch does not append it twice, guarantees.md). Without
it a retry may store a batch twice, as after ``request_timeout``. The old leader
cannot acknowledge a batch that reaches it late: it no longer leads, or its followers
no longer follow it, and what it appended alone is cut when it follows.

:func:`moved_requests` is the rule (no IO); :class:`LeaderCheck` runs the look-ups.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from broker.client.accumulator import TopicPartition
from broker.common.errors import LogferryError

log = logging.getLogger("logferry.producer")

CHECK_AFTER_S = 1.0
"""A request unanswered this long has its partitions' leaders looked up again (an
acks=all answer takes milliseconds; a busy cluster's a few hundred)."""
CHECK_EVERY_S = 0.5
"""At most one look-up per this many seconds while requests keep waiting."""
LOOKUP_TIMEOUT_S = 3.0
"""How long one broker is given to answer the look-up's metadata request."""

Address = tuple[str, int]


class PendingRequest(NamedTuple):
    """A produce request sent and not yet answered."""

    key: int
    """The sender's key for it (its response future's id)."""
    sent_at: float
    """The sender's clock when it was written."""
    connection: Any
    """The connection it went out on (closing it fails the request)."""
    address: Address
    """The broker it went to: the leader the metadata named then."""
    partitions: Sequence[TopicPartition]
    """The partitions whose batches it carries."""


class LeaderCluster(Protocol):
    """What the look-up needs of :class:`broker.client.cluster.Cluster`."""

    def refresh(
        self,
        topics: Sequence[str] | None = None,
        create: bool = False,
        avoid: Iterable[Address] = (),
        timeout: float | None = None,
    ) -> dict[str, Any]: ...

    def cached_leader_address(self, topic: str, partition: int) -> Address | None: ...


def moved_requests(
    waiting: Iterable[PendingRequest], leader_of: Callable[[str, int], Address | None]
) -> list[tuple[PendingRequest, TopicPartition, Address]]:
    """The waiting requests with a partition that ``leader_of`` now places at another
    address: ``(request, that partition, its leader's address)``, one per request.

    A partition without a leader (None: an election under way) or still led at the
    request's address keeps its request waiting.
    """
    moved = []
    for request in waiting:
        for tp in request.partitions:
            leader = leader_of(*tp)
            if leader is not None and leader != request.address:
                moved.append((request, tp, leader))
                break
    return moved


class LeaderCheck:
    """Looks up the leaders of long-waiting requests and reports those that moved.

    :meth:`poll` is called by the sender's housekeeping with every pending request;
    ``on_moved(request, partition, leader)`` is called (in the look-up's thread) for
    each request whose partition moved. ``spawn`` runs a look-up (a daemon thread;
    tests run it inline) and ``clock`` is the sender's.
    """

    def __init__(
        self,
        cluster: LeaderCluster,
        on_moved: Callable[[PendingRequest, TopicPartition, Address], None],
        clock: Callable[[], float],
        spawn: Callable[[Callable[[], None]], None] | None = None,
    ):
        self.cluster = cluster
        self.on_moved = on_moved
        self.clock = clock
        self.spawn = spawn or _daemon_thread
        self._lock = threading.Lock()
        self._running = False
        self._last = float("-inf")

    def poll(self, pending: Iterable[PendingRequest], now: float) -> None:
        """Start a look-up if a request waited past :data:`CHECK_AFTER_S`, none runs
        and the last began :data:`CHECK_EVERY_S` ago or more."""
        waiting = [r for r in pending if now - r.sent_at > CHECK_AFTER_S]
        if not waiting:
            return
        with self._lock:
            if self._running or now - self._last < CHECK_EVERY_S:
                return
            self._running, self._last = True, now
        try:
            self.spawn(lambda: self._look_up(waiting))
        except BaseException:
            with self._lock:
                self._running = False
            raise

    def _look_up(self, waiting: list[PendingRequest]) -> None:
        try:
            topics = sorted({topic for r in waiting for topic, _ in r.partitions})
            try:  # not the brokers keeping them waiting: they may not answer either
                self.cluster.refresh(topics, avoid={r.address for r in waiting}, timeout=LOOKUP_TIMEOUT_S)
            except LogferryError as exc:
                log.debug("looking up the leaders of %s for requests still waiting: %s", topics, exc)
                return
            for request, tp, leader in moved_requests(waiting, self.cluster.cached_leader_address):
                log.warning(
                    "%s-%d is now led at %s:%d; giving up the requests waiting %.1fs on %s:%d and retrying them there",
                    tp[0],
                    tp[1],
                    *leader,
                    self.clock() - request.sent_at,
                    *request.address,
                )
                self.on_moved(request, tp, leader)
        finally:
            with self._lock:
                self._running = False


def _daemon_thread(target: Callable[[], None]) -> None:
    threading.Thread(target=target, daemon=True, name="logferry-leader-check").start()


__all__ = ["CHECK_AFTER_S", "CHECK_EVERY_S", "LeaderCheck", "PendingRequest", "moved_requests"]
