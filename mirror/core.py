"""The copy loop: poll source batches, append them to the target, commit what it acknowledged.

The copy is pipelined: the loop polls and sends while earlier batches are still on
their way, up to ``max_inflight_bytes`` of stored batch bytes sent and not yet
acknowledged, so neither the fetches from the source nor the produce requests to the
target wait for each other's round trips (what a WAN between the clusters costs)::

    while room in the window: batches = consumer.poll_batches(acknowledge=False)
                              for each: producer.send_raw(target topic, partition, bytes)
    acknowledgements (any order) -> CommitTracker -> consumer.acknowledge_batches(...)

A source batch counts as processed only once the target acknowledged it *and* every
earlier batch of its partition (:class:`mirror.commit_tracker.CommitTracker`), so the
group commits (in the background, every ``commit_interval_ms``) only source positions
whose data the target already holds. A crash anywhere repeats at most the uncommitted
tail; nothing is skipped. While the target is away (mirror/outage.py) the producer
retries each batch by itself, preparing a new target topic waits with a bounded
backoff, and the outage is logged and measured; past ``delivery_timeout_s`` of outage,
or on a batch refused for good, the mirror stops, committing only the positions before
it (exit 1, resume later).

Stopping (SIGTERM): no more polls; the batches in flight are waited for (bounded by
``shutdown_timeout_s``), the acknowledged ones count as processed, the group commits
and releases its partitions, and ``run`` returns 0.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from functools import partial

from broker.client import CODECS, DeliveryFuture, PartitionNotOwnedError, Producer, RawBatch, SimpleConsumer
from broker.common.errors import AuthorizationError, LogferryError, RequestTimedOutError
from mirror.audit import MirrorAudit
from mirror.commit_tracker import CommitTracker
from mirror.config import MirrorConfig
from mirror.errors import DeliveryFailedError, MirrorError
from mirror.lifecycle import MirrorLoop
from mirror.outage import TargetUnavailableError, is_transient
from mirror.routing import Router

log = logging.getLogger("logferry.mirror")

NO_ACK_S = 10.0
"""Batches in flight and no acknowledgement from the target for this long: the target
counts as unavailable (the producer goes on retrying each batch by itself)."""


class _StopSending(Exception):
    """:meth:`Mirror.stop` while a batch waited for the target: send nothing more."""


class Mirror(MirrorLoop):
    """One mirror process: a member of the mirror group on the source, a producer on the target."""

    def __init__(self, config: MirrorConfig):
        super().__init__(config)
        self._producer: Producer | None = None
        self._warned_rehash: set[str] = set()
        self._tracker = CommitTracker()
        self._outcomes: deque[tuple[int, LogferryError | None]] = deque()
        """(tracker id, error or None) from the producer's threads, drained by the loop."""
        self._rewind: dict[tuple[str, int], int] = {}
        """Partitions of refused topics -> first source offset not copied (fetched again
        from there when the topic is retried)."""
        self._resuming: set[str] = set()
        """Refused topics due for a retry, waiting for their batches in flight to settle."""
        self._progress_at = time.monotonic()
        """When the target last acknowledged a batch, or nothing was in flight."""

    # -- lifecycle (mirror/lifecycle.py) -----------------------------------------------------

    def _connect(self) -> None:
        cfg = self.config
        assert self._source is not None and self._admin is not None
        self._producer = Producer(
            zk=cfg.target_zk,
            tls=cfg.target_tls,
            sasl=cfg.target_sasl,
            listener=cfg.target_listener,
            linger_ms=0,
            # idempotent: retried copies are dropped
            acks=cfg.target_acks,
            idempotence=True,
            buffer_bytes=max(2 * (cfg.max_inflight_bytes + cfg.poll_max_bytes), 64 * 1024 * 1024),
            delivery_timeout=cfg.delivery_timeout_s,
            max_request_bytes=cfg.max_request_bytes,
            client_id=f"mirror-{cfg.group}",
        )
        self._router = Router(self._source, self._admin, on_rehash=self._count_rehash, codec=CODECS[cfg.compression])

    def _make_audit(self, member: str) -> MirrorAudit:
        cfg = self.config
        assert self._producer is not None
        return MirrorAudit(
            self._producer,
            member,
            cfg.audit_topic,
            cfg.audit_window_s,
            self._admin,
            target=SimpleConsumer(
                zk=cfg.target_zk, tls=cfg.target_tls, sasl=cfg.target_sasl, listener=cfg.target_listener
            ),
        )

    def _inflight_bytes(self) -> int:
        return self._tracker.inflight_bytes

    def _close_target(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(LogferryError):
                self._producer.close(timeout=5)
            self._producer = None

    # -- the pipeline ------------------------------------------------------------------------

    def _send(self, batches: list[tuple[tuple[str, int], RawBatch]]) -> None:
        """Hand polled batches to the producer; each is tracked until the target acknowledges."""
        assert self._producer is not None
        try:
            self._send_each(batches)
        except _StopSending:
            # stopped while the target was away: the batches from here on were never
            # sent nor tracked, so nothing is committed past them; the next run copies them
            log.info("mirror: stopping while the target is unavailable; unsent batches are left to the next run")

    def _send_each(self, batches: list[tuple[tuple[str, int], RawBatch]]) -> None:
        assert self._producer is not None
        for (topic, partition), batch in batches:
            if topic in self.refusals.topics and (self.refusals.halted(topic) or topic in self._resuming):
                self._hold((topic, partition), batch.offset)
                continue
            try:
                routes = self._route(topic, partition, batch)
            except AuthorizationError as exc:  # e.g. no create on the target: that topic only
                self._refuse(topic, exc)
                self._hold((topic, partition), batch.offset)
                continue
            batch_id = self._tracker.add(
                (topic, partition), batch.offset, batch.next_offset, batch.count, len(batch.raw), sends=len(routes)
            )
            if self._audit is not None:
                self._audit.before_send(topic, [tp for tp, _ in routes])
            futures = [self._producer.send_raw(topic, tp, data) for tp, data in routes]
            for future in futures:
                future.add_callback(partial(self._on_outcome, batch_id))
            if self._audit is not None:
                self._audit.copied(topic, batch, [tp for tp, _ in routes], futures)

    def _on_outcome(self, batch_id: int, future: DeliveryFuture) -> None:
        """Producer thread: note the outcome; the copy loop applies it (the tracker is its own)."""
        self._outcomes.append((batch_id, future.exception()))
        self._wake.set()

    def _settle(self) -> None:
        """Apply acknowledgements: positions now safe count as processed; a failure stops."""
        self._wake.clear()
        tracker = self._tracker
        outcomes = self._outcomes
        acked = False
        while outcomes:
            batch_id, error = outcomes.popleft()
            if error is None:
                tracker.acked(batch_id)
                acked = True
            else:
                tracker.failed(batch_id, error)
        self._watch_target(acked)
        refused = [(i, b) for i, b in tracker.failures() if isinstance(b.error, AuthorizationError)]
        for batch_id, batch in refused:  # that topic only: copy it again from there later
            first = tracker.discard_from(batch_id)
            if first is not None:
                assert batch.error is not None
                self._refuse(batch.tp[0], batch.error)
                self._hold(first.tp, first.offset)
        advanced = tracker.advance()
        if advanced.positions:
            assert self._consumer is not None
            self._consumer.acknowledge_batches(advanced.positions)
            per_topic: dict[str, list[int]] = {}
            for batch in advanced.done:
                counts = per_topic.setdefault(batch.tp[0], [0, 0, 0])
                counts[0] += 1
                counts[1] += batch.messages
                counts[2] += batch.nbytes
            for topic, (nb, nm, nbytes) in per_topic.items():
                self.metrics.record(topic, nb, nm, nbytes)
                if self.refusals.topics:
                    self._granted(topic)
        failures = tracker.failures()
        if failures:
            _, batch = failures[0]
            if batch.error is not None and is_transient(batch.error):  # retried for delivery_timeout_s
                raise TargetUnavailableError(
                    f"the target did not take a batch of {batch.tp[0]}-{batch.tp[1]} at offset "
                    f"{batch.offset} within delivery_timeout_s ({self.config.delivery_timeout_s:g}s): "
                    f"{batch.error}; source positions from there on were not committed"
                )
            raise DeliveryFailedError(
                f"the target refused a batch of {batch.tp[0]}-{batch.tp[1]} at offset {batch.offset} "
                f"({batch.error}); source positions from there on were not committed"
            )

    def _watch_target(self, acked: bool) -> None:
        """Produce mode's view of an outage (the producer retries each batch by itself):
        the target counts as away once batches waited ``NO_ACK_S`` without any
        acknowledgement, and as back at the next acknowledgement."""
        now = time.monotonic()
        if acked or not len(self._tracker):
            self._progress_at = now
            if acked:
                self.outage.ok()
            return
        waited = now - self._progress_at
        if waited >= NO_ACK_S and self.outage.may_try(now):
            self.outage.failed(
                "produce",
                RequestTimedOutError(
                    f"no acknowledgement from the target for {waited:.0f}s, {len(self._tracker)} batches in flight"
                ),
            )

    def _drain(self) -> None:
        """Stopping: wait (bounded) for the batches in flight, so their positions commit."""
        tracker = self._tracker
        self._settle()
        if not len(tracker):
            return
        timeout = self.config.shutdown_timeout_s
        log.info("mirror: stopping; waiting up to %.0fs for %d in-flight batches", timeout, len(tracker))
        deadline = time.monotonic() + timeout
        while len(tracker) and time.monotonic() < deadline:
            self._wake.wait(min(0.2, max(deadline - time.monotonic(), 0)))
            self._settle()
        if len(tracker):
            log.warning(
                "mirror: the target did not acknowledge %d batches in time; they will be copied again by the next run",
                len(tracker),
            )

    def _route(self, topic: str, partition: int, batch: RawBatch) -> list[tuple[int, bytes | memoryview]]:
        """Target partitions and bytes for a batch; waits while the target is away.

        Looking up or creating the target topic needs a live target broker; the batch is
        not acknowledged yet, so waiting here loses nothing. The waits follow
        :attr:`outage` (bounded backoff; it gives up after ``delivery_timeout_s``);
        :meth:`stop` ends them with :class:`_StopSending`.
        """
        failed = False
        while True:
            try:
                routes = self._router.route(topic, partition, batch.raw)
            except AuthorizationError:
                raise  # not a target away: that topic is refused (_send)
            except (LogferryError, OSError) as exc:
                if not is_transient(exc):
                    raise MirrorError(f"cannot prepare target topic {topic!r}: {exc}") from exc
                failed = True
                self._wait_for_target(self.outage.failed("prepare topic", exc))
                if self.stopping.is_set():
                    raise _StopSending from exc
                continue
            if failed:  # the router asked the target again, and it answered
                self.outage.ok()
            return routes

    # -- topics refused for want of an ACL (mirror/refusals.py) ------------------------------

    def _hold(self, tp: tuple[str, int], offset: int) -> None:
        """Not copied now: fetch ``tp`` again from ``offset`` (at the latest) on retry."""
        if offset < self._rewind.get(tp, offset + 1):
            self._rewind[tp] = offset
        if self._consumer is not None:
            self._consumer.pause(*tp)

    def _tend(self, now: float) -> None:
        """Retry refused topics that are due, once nothing of theirs is in flight: each
        held partition is fetched again from its first byte not copied."""
        self._resuming.update(self.refusals.due(now))
        for topic in sorted(self._resuming):
            held = [tp for tp in self._rewind if tp[0] == topic]
            if any(self._tracker.pending(tp) for tp in held):
                continue
            assert self._consumer is not None
            for tp in held:
                offset = self._rewind.pop(tp)
                # revoked: its new owner starts at the committed position
                with contextlib.suppress(PartitionNotOwnedError):
                    self._consumer.seek(tp[0], tp[1], offset)
            for tp in self._consumer.assignment():
                if tp[0] == topic:
                    self._consumer.resume(*tp)
            self._resuming.discard(topic)
            log.debug("mirror: trying %r again", topic)

    def _count_rehash(self, topic: str) -> None:
        self.metrics.rehashed[(("topic", topic),)] += 1

    # -- retention gaps (called from the consumer's fetcher thread) ---------------------------

    def _on_gap(self, topic: str, partition: int, offset: int, log_start: int) -> bool:
        lost = log_start - offset
        self.metrics.gaps[(("topic", topic), ("partition", str(partition)))] += 1
        if self.config.on_gap == "skip":
            self.metrics.gap_bytes[(("topic", topic), ("partition", str(partition)))] += lost
            log.warning(
                "MIRROR GAP SKIPPED: %s-%d: offsets %d..%d were deleted by retention before "
                "being copied; %d bytes lost, resuming at %d (on_gap=skip)",
                topic,
                partition,
                offset,
                log_start,
                lost,
                log_start,
            )
            return True
        self.metrics.halted[(topic, partition)] = {"offset": offset, "log_start": log_start, "bytes_deleted": lost}
        log.error(
            "MIRROR PARTITION STOPPED: %s-%d: resume offset %d was deleted by retention "
            "(the log now starts at %d, %d bytes never copied). Nothing is skipped: "
            'set on_gap = "skip" or `logferry group seek` the mirror group past it, then '
            "restart.",
            topic,
            partition,
            offset,
            log_start,
            lost,
        )
        return False


__all__ = ["Mirror"]
