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
tail; nothing is skipped. The producer retries a batch while the target is down
(``delivery_timeout_s``); a batch refused for good stops the mirror, committing only
the positions before it (exit 1, resume later).

Stopping (SIGTERM): no more polls; the batches in flight are waited for (bounded by
``shutdown_timeout_s``), the acknowledged ones count as processed, the group commits
and releases its partitions, and ``run`` returns 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from functools import partial

from broker.client import (
    CODECS, Admin, DeliveryFuture, GroupConsumer, Producer, RawBatch, SimpleConsumer,
)
from broker.common.errors import LogferryError, MetricsError
from broker.common.metrics import MetricsServer
from broker.common.tls import metrics_context
from broker.common.retry import Retry
from mirror.audit import MirrorAudit
from mirror.commit_tracker import CommitTracker
from mirror.config import MirrorConfig
from mirror.errors import DeliveryFailedError, MirrorError
from mirror.routing import Router
from mirror.status import MirrorMetrics, write_status_file

log = logging.getLogger("logferry.mirror")

STATUS_EVERY_S = 2.0
POLL_TIMEOUT_S = 0.5
"""Longest poll while nothing is in flight."""
BUSY_POLL_S = 0.02
"""Longest poll while batches are in flight (their acknowledgements wait meanwhile)."""


class Mirror:
    """One mirror process: a member of the mirror group on the source, a producer on the target."""

    def __init__(self, config: MirrorConfig):
        self.config = config
        self.stopping = threading.Event()
        self.metrics = MirrorMetrics()
        self._consumer: GroupConsumer | None = None
        self._producer: Producer | None = None
        self._source: SimpleConsumer | None = None
        self._admin: Admin | None = None
        self._server: MetricsServer | None = None
        self._warned_rehash: set[str] = set()
        self._tracker = CommitTracker()
        self._outcomes: deque[tuple[int, LogferryError | None]] = deque()
        """(tracker id, error or None) from the producer's threads, drained by the loop."""
        self._wake = threading.Event()
        self._audit: MirrorAudit | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to both clusters and join the group (raises MirrorError if it cannot)."""
        cfg = self.config
        if cfg.metrics_port:  # first: a taken port fails before anything connects
            try:
                self._server = MetricsServer(self.metrics.registry, cfg.metrics_host,
                                             cfg.metrics_port, name="mirror-metrics",
                                             ssl_context=metrics_context(cfg.metrics_tls))
            except MetricsError as exc:
                raise MirrorError(f"metrics.port: {exc}") from None
        try:
            self._source = SimpleConsumer(zk=cfg.source_zk, tls=cfg.source_tls,
                                          sasl=cfg.source_sasl, listener=cfg.source_listener)
            self._admin = Admin(zk=cfg.target_zk, tls=cfg.target_tls, sasl=cfg.target_sasl,
                                listener=cfg.target_listener)
            self._producer = Producer(zk=cfg.target_zk, tls=cfg.target_tls, sasl=cfg.target_sasl,
                                      listener=cfg.target_listener,
                                      linger_ms=0,
                                      # idempotent: retried copies are dropped
                                      acks=cfg.target_acks, idempotence=True,
                                      buffer_bytes=max(2 * (cfg.max_inflight_bytes + cfg.poll_max_bytes),
                                                       64 * 1024 * 1024),
                                      delivery_timeout=cfg.delivery_timeout_s,
                                      max_request_bytes=cfg.max_request_bytes,
                                      client_id=f"mirror-{cfg.group}")
            self._router = Router(self._source, self._admin, on_rehash=self._count_rehash,
                                  codec=CODECS[cfg.compression])
            self._consumer = GroupConsumer(
                cfg.group, pattern=cfg.topic_regex(), zk=cfg.source_zk, start=cfg.start,
                auto_commit_ms=cfg.commit_interval_ms, session_timeout=cfg.session_timeout_s,
                max_bytes=cfg.fetch_max_bytes, queue_bytes=cfg.queue_bytes,
                consumer_id=cfg.consumer_id, raw_batches=True, on_gap=self._on_gap,
                fetch_requests_per_broker=cfg.fetch_requests_per_broker, tls=cfg.source_tls,
                sasl=cfg.source_sasl, listener=cfg.source_listener)
        except LogferryError as exc:
            self._close_clients()
            if isinstance(exc, MirrorError):
                raise
            raise MirrorError(f"cannot start the mirror: {exc}") from exc
        self.metrics.consumer_metrics = self._consumer.metrics
        if cfg.audit_topic:  # its own counts on the target (mirror/audit.py)
            self._audit = MirrorAudit(self._producer, self._consumer.consumer_id, cfg.audit_topic,
                                      cfg.audit_window_s, self._admin, target=SimpleConsumer(
                                          zk=cfg.target_zk, tls=cfg.target_tls, sasl=cfg.target_sasl,
                                          listener=cfg.target_listener))
            self._audit.start()
        log.info("mirror %s: %s -> %s, topics %s, member %s", cfg.group, cfg.source_zk,
                 cfg.target_zk, cfg.topic_regex(), self._consumer.consumer_id)

    def stop(self) -> None:
        """Ask :meth:`run` to finish its in-flight batches, commit and return (signal-safe)."""
        self.stopping.set()
        self._wake.set()

    def run(self) -> int:
        """Copy until :meth:`stop`; returns 0. Raises MirrorError if the target refuses data."""
        assert self._consumer is not None, "start() first"
        consumer = self._consumer
        tracker = self._tracker
        limit = self.config.max_inflight_bytes
        last_status = 0.0
        try:
            while not self.stopping.is_set():
                self._settle()
                room = limit - tracker.inflight_bytes
                if room > 0:
                    batches = consumer.poll_batches(BUSY_POLL_S if len(tracker) else POLL_TIMEOUT_S,
                                                    min(self.config.poll_max_bytes, room),
                                                    acknowledge=False)
                    if batches:
                        self._send(batches)
                else:
                    self._wake.wait(0.2)  # the window is full: wait for acknowledgements
                self.metrics.tick()
                now = time.monotonic()
                if self.config.status_file and now - last_status >= STATUS_EVERY_S:
                    last_status = now
                    self._write_status()
            self._drain()
        finally:
            self.close()
        return 0

    def close(self) -> None:
        """Commit the acknowledged positions, leave the group, disconnect."""
        if self._consumer is not None:
            try:
                # acknowledged batches were counted as processed one by one; the rest is not
                self._consumer.close(processed=False)
            except LogferryError as exc:
                log.warning("mirror: closing the group consumer: %s", exc)
            self._consumer = None
        if self.config.status_file:
            self._write_status()
        self._close_clients()

    def _close_clients(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._audit is not None:
            self._audit.close()
            self._audit = None
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            except LogferryError:
                pass
            self._producer = None
        for client in (self._source, self._admin):
            if client is not None:
                client.close()
        self._source = self._admin = None

    # -- the pipeline ------------------------------------------------------------------------

    def _send(self, batches: list[tuple[tuple[str, int], RawBatch]]) -> None:
        """Hand polled batches to the producer; each is tracked until the target acknowledges."""
        assert self._producer is not None
        for (topic, partition), batch in batches:
            routes = self._route(topic, partition, batch)
            batch_id = self._tracker.add((topic, partition), batch.offset, batch.next_offset,
                                         batch.count, len(batch.raw), sends=len(routes))
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
        while outcomes:
            batch_id, error = outcomes.popleft()
            if error is None:
                tracker.acked(batch_id)
            else:
                tracker.failed(batch_id, error)
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
        failures = tracker.failures()
        if failures:
            _, batch = failures[0]
            raise DeliveryFailedError(
                f"the target refused a batch of {batch.tp[0]}-{batch.tp[1]} at offset {batch.offset} "
                f"({batch.error}); source positions from there on were not committed")

    def _drain(self) -> None:
        """Stopping: wait (bounded) for the batches in flight, so their positions commit."""
        tracker = self._tracker
        self._settle()
        if not len(tracker):
            return
        timeout = self.config.shutdown_timeout_s
        log.info("mirror: stopping; waiting up to %.0fs for %d in-flight batches", timeout,
                 len(tracker))
        deadline = time.monotonic() + timeout
        while len(tracker) and time.monotonic() < deadline:
            self._wake.wait(min(0.2, max(deadline - time.monotonic(), 0)))
            self._settle()
        if len(tracker):
            log.warning("mirror: the target did not acknowledge %d batches in time; they "
                        "will be copied again by the next run", len(tracker))

    def _route(self, topic: str, partition: int, batch: RawBatch) -> list:
        """Target partitions and bytes for a batch; waits (bounded) while the target is away.

        Looking up or creating the target topic needs a live target broker; the batch is
        not acknowledged yet, so waiting here loses nothing.
        """
        retry = Retry(initial=0.1, maximum=2.0, deadline=self.config.delivery_timeout_s)
        while True:
            try:
                return self._router.route(topic, partition, batch.raw)
            except LogferryError as exc:
                # stopping: give up once the waits grew past a second (0.1+0.2+0.4+0.8 s)
                if retry.expired or (self.stopping.is_set() and retry.failures >= 4):
                    raise MirrorError(f"cannot prepare target topic {topic!r}: {exc}") from exc
                log.warning("mirror: target topic %r not reachable yet (%s); retrying", topic, exc)
                retry.sleep()

    def _count_rehash(self, topic: str) -> None:
        self.metrics.rehashed[(("topic", topic),)] += 1

    # -- retention gaps (called from the consumer's fetcher thread) ---------------------------

    def _on_gap(self, topic: str, partition: int, offset: int, log_start: int) -> bool:
        lost = log_start - offset
        self.metrics.gaps[(("topic", topic), ("partition", str(partition)))] += 1
        if self.config.on_gap == "skip":
            self.metrics.gap_bytes[(("topic", topic), ("partition", str(partition)))] += lost
            log.warning("MIRROR GAP SKIPPED: %s-%d: offsets %d..%d were deleted by retention before "
                        "being copied; %d bytes lost, resuming at %d (on_gap=skip)", topic,
                        partition, offset, log_start, lost, log_start)
            return True
        self.metrics.halted[(topic, partition)] = {"offset": offset, "log_start": log_start,
                                                   "bytes_deleted": lost}
        log.error("MIRROR PARTITION STOPPED: %s-%d: resume offset %d was deleted by retention "
                  "(the log now starts at %d, %d bytes never copied). Nothing is skipped: "
                  "set on_gap = \"skip\" or `logferry group seek` the mirror group past it, then "
                  "restart.", topic, partition, offset, log_start, lost)
        return False

    def _write_status(self) -> None:
        assert self.config.status_file
        try:
            doc = self.metrics.document()
            doc["group"] = self.config.group
            if self._consumer is not None:
                doc["consumer_id"] = self._consumer.consumer_id
            write_status_file(self.config.status_file, doc)
        except (OSError, LogferryError) as exc:
            log.debug("mirror: status file not written: %s", exc)


__all__ = ["Mirror"]
