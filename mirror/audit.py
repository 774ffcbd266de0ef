"""The mirror's own audit (the paper, section 5): what it copied, per topic and window.

The mirror publishes, to the target cluster's audit topic, :class:`broker.client.AuditRecord`
maps with ``stage = "mirror"``: per topic and window, ``sent`` messages it handed to the
target producer and ``acked`` of them the target acknowledged. Counting is per batch, from
the batch header (its message count, and its base timestamp for the window: the first
message's), never per message: a batch whose messages straddle a window boundary counts
whole in its first message's window, so two neighbouring windows can differ by one
batch while their sum is exact.

Why its own records: the mirror copies the source's audit topic like any other topic, so
on the target the agents' records are copies, and a mirror that copies a stretch twice
(a restart from an older position) doubles the data *and* those copies alike; the
duplicates could not show. Its own count does: with the agents' records read on the live
cluster, mirror / agent over 100% is what it copied twice (docs/mirror.md, "Audit"). The
audit topic itself is not data and is not counted.

Thread safety: :meth:`MirrorAudit.copied` runs in the copy loop, acknowledgements arrive on
the producer's threads, publishing runs on a timer thread; one lock guards the ledger.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any, Callable, Sequence

from broker.client import (
    MIRROR_STAGE, Admin, AuditLedger, DeliveryFuture, Producer, RawBatch, batch_timestamp,
    window_of,
)
from broker.common.errors import LogferryError, TopicExistsError, UnknownTopicOrPartitionError

log = logging.getLogger("logferry.mirror.audit")


class MirrorAudit:
    """Counts copied batches per (topic, window) and publishes due records to the target."""

    def __init__(self, producer: Producer, host: str, topic: str = "_audit",
                 window_s: float = 60.0, admin: Admin | None = None,
                 clock: Callable[[], float] = time.time):
        self.producer = producer
        self.host = host
        self.topic = topic
        self.window_ms = max(1, int(window_s * 1000))
        self.ledger = AuditLedger(self.window_ms, stage=MIRROR_STAGE)
        self.admin = admin
        self.clock = clock
        self.published = 0
        """Records published so far."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._topic_ready = False

    # -- counting (copy loop and producer threads) --------------------------------------------

    def copied(self, topic: str, batch: RawBatch, futures: Sequence[DeliveryFuture]) -> None:
        """One source batch went to the target as ``futures`` (more than one if re-hashed)."""
        if topic == self.topic or not futures:
            return
        window = window_of(batch_timestamp(batch.raw), self.window_ms)
        with self._lock:
            self.ledger.sent(topic, window, batch.count)
        state = [len(futures), True]  # sends left, all ok so far
        for future in futures:
            future.add_callback(partial(self._done, topic, window, batch.count, state))

    def _done(self, topic: str, window: int, count: int, state: list[Any],
              future: DeliveryFuture) -> None:
        with self._lock:
            state[0] -= 1
            if future.exception() is not None:
                state[1] = False
            if state[0] == 0:
                self.ledger.finished(topic, window, count, state[1])

    # -- publishing ---------------------------------------------------------------------------

    def publish_due(self, final: bool = False) -> int:
        """Send the records that are due (every one with ``final``); returns how many."""
        with self._lock:
            records = self.ledger.due(int(self.clock() * 1000), final=final)
        if not records:
            return 0
        self._ensure_topic()
        values = [r.encode(self.host) for r in records]
        self.producer.send(self.topic, values, key=self.host.encode())
        self.published += len(values)
        return len(values)

    def _ensure_topic(self) -> None:
        """Create the target's audit topic (one partition, as the agents' is) if missing."""
        if self._topic_ready or self.admin is None:
            return
        try:
            self.admin.describe_topic(self.topic)
        except UnknownTopicOrPartitionError:
            try:
                self.admin.create_topic(self.topic, partitions=1)
            except TopicExistsError:
                pass
        self._topic_ready = True

    def start(self) -> None:
        """Publish due records every window in a background thread."""
        self._thread = threading.Thread(target=self._run, name="mirror-audit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = min(self.window_ms / 1000, 60.0)
        while not self._stop.wait(interval):
            try:
                self.publish_due()
            except LogferryError as exc:  # the target is away: the records wait in the ledger
                log.warning("mirror audit: records not published yet: %s", exc)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the timer and publish every window (acknowledged counts so far); call before
        the producer closes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.publish_due(final=True)
            self.producer.flush(timeout)
        except LogferryError as exc:
            log.warning("mirror audit: last records not published: %s", exc)


__all__ = ["MirrorAudit"]
