"""The copy loop: poll source batches, append them to the target, wait for every ack.

One round::

    batches = consumer.poll_batches()     # acknowledges the previous round's batches
    for each: producer.send_raw(target topic, partition, the stored bytes)
    wait until the target acknowledged all of them

A batch counts as processed only when the next round polls, i.e. after the target
acknowledged it, so the group commits (in the background, every
``commit_interval_ms``) only source positions whose data the target already holds.
A crash anywhere repeats at most the uncommitted tail; nothing is skipped. The
producer retries a batch while the target is down (``delivery_timeout_s``); a batch
refused for good stops the mirror without acknowledging it (exit 1, resume later).

Stopping (SIGTERM): the current round is finished (bounded by ``shutdown_timeout_s``),
its batches are acknowledged, the group commits and releases its partitions, and
``run`` returns 0.
"""

from __future__ import annotations

import logging
import threading
import time

from broker.client import CODECS, Admin, GroupConsumer, Producer, RawBatch, SimpleConsumer
from broker.common.errors import LogferryError, MetricsError
from broker.common.metrics import MetricsServer
from broker.common.retry import Retry
from mirror.config import MirrorConfig
from mirror.errors import DeliveryFailedError, MirrorError
from mirror.routing import Router
from mirror.status import MirrorMetrics, write_status_file

log = logging.getLogger("logferry.mirror")

STATUS_EVERY_S = 2.0
POLL_TIMEOUT_S = 0.5


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

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to both clusters and join the group (raises MirrorError if it cannot)."""
        cfg = self.config
        if cfg.metrics_port:  # first: a taken port fails before anything connects
            try:
                self._server = MetricsServer(self.metrics.registry, cfg.metrics_host,
                                             cfg.metrics_port, name="mirror-metrics")
            except MetricsError as exc:
                raise MirrorError(f"metrics.port: {exc}") from None
        try:
            self._source = SimpleConsumer(zk=cfg.source_zk)
            self._admin = Admin(zk=cfg.target_zk)
            self._producer = Producer(zk=cfg.target_zk, linger_ms=0, acks=cfg.target_acks,
                                      buffer_bytes=max(4 * cfg.poll_max_bytes, 64 * 1024 * 1024),
                                      delivery_timeout=cfg.delivery_timeout_s,
                                      client_id=f"mirror-{cfg.group}")
            self._router = Router(self._source, self._admin, on_rehash=self._count_rehash,
                                  codec=CODECS[cfg.compression])
            self._consumer = GroupConsumer(
                cfg.group, pattern=cfg.topic_regex(), zk=cfg.source_zk, start=cfg.start,
                auto_commit_ms=cfg.commit_interval_ms, session_timeout=cfg.session_timeout_s,
                max_bytes=cfg.fetch_max_bytes, queue_bytes=cfg.queue_bytes,
                consumer_id=cfg.consumer_id, raw_batches=True, on_gap=self._on_gap)
        except LogferryError as exc:
            self._close_clients()
            if isinstance(exc, MirrorError):
                raise
            raise MirrorError(f"cannot start the mirror: {exc}") from exc
        self.metrics.consumer_metrics = self._consumer.metrics
        log.info("mirror %s: %s -> %s, topics %s, member %s", cfg.group, cfg.source_zk,
                 cfg.target_zk, cfg.topic_regex(), self._consumer.consumer_id)

    def stop(self) -> None:
        """Ask :meth:`run` to finish its round, commit and return (signal-safe)."""
        self.stopping.set()

    def run(self) -> int:
        """Copy until :meth:`stop`; returns 0. Raises MirrorError if the target refuses data."""
        assert self._consumer is not None, "start() first"
        consumer = self._consumer
        last_status = 0.0
        processed = True
        try:
            while not self.stopping.is_set():
                batches = consumer.poll_batches(POLL_TIMEOUT_S, self.config.poll_max_bytes)
                if batches and not self._copy(batches):
                    processed = False  # stopped before the target acknowledged the round
                    break
                self.metrics.tick()
                now = time.monotonic()
                if self.config.status_file and now - last_status >= STATUS_EVERY_S:
                    last_status = now
                    self._write_status()
        except BaseException:
            processed = False
            raise
        finally:
            self.close(processed)
        return 0

    def close(self, processed: bool = True) -> None:
        """Commit (the last round too if ``processed``), leave the group, disconnect."""
        if self._consumer is not None:
            try:
                self._consumer.close(processed=processed)
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

    # -- one round ---------------------------------------------------------------------------

    def _copy(self, batches: list[tuple[tuple[str, int], RawBatch]]) -> bool:
        """Send a round and wait for every ack; False if stopped before they all came."""
        assert self._producer is not None
        futures = []
        per_topic: dict[str, list[int]] = {}
        for (topic, partition), batch in batches:
            for target_partition, data in self._route(topic, partition, batch):
                futures.append(self._producer.send_raw(topic, target_partition, data))
            counts = per_topic.setdefault(topic, [0, 0, 0])
            counts[0] += 1
            counts[1] += batch.count
            counts[2] += len(batch.raw)
        deadline = None
        for future in futures:
            while not future.done():
                if self.stopping.is_set() and deadline is None:
                    deadline = time.monotonic() + self.config.shutdown_timeout_s
                    log.info("mirror: stopping; waiting up to %.0fs for %d in-flight batches",
                             self.config.shutdown_timeout_s, sum(not f.done() for f in futures))
                if deadline is not None and time.monotonic() >= deadline:
                    log.warning("mirror: target did not acknowledge the last round in time; "
                                "those batches will be copied again by the next run")
                    return False
                try:
                    future.wait(0.2)
                except LogferryError:
                    pass  # not yet acknowledged, or failed: looked at below
            error = future.exception()
            if error is not None:
                raise DeliveryFailedError(f"the target refused a batch ({error}); source positions "
                                          "after the last acknowledged batch were not committed")
        for topic, (nb, nm, nbytes) in per_topic.items():
            self.metrics.record(topic, nb, nm, nbytes)
        return True

    def _route(self, topic: str, partition: int, batch: RawBatch) -> list:
        """Target partitions and bytes for a batch; waits (bounded) while the target is away.

        Looking up or creating the target topic needs a live target broker; nothing of
        the round was acknowledged yet, so waiting here loses nothing.
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
