"""The mirror's own audit (the paper, section 5): what it copied, per topic and window.

The mirror publishes, to ``_audit.mirror`` on the target cluster (not ``_audit``, which is
a copy of the source's, byte for byte in preserve mode), :class:`broker.client.AuditRecord`
maps with ``stage = "mirror"``: per topic and window, ``sent`` messages it handed to the
target producer and ``acked`` of them the target acknowledged. Each message counts in the
window of its own timestamp (event time, :func:`broker.client.batch_windows`: the batch's
timestamps are read, its keys and values skipped), as the agents count it: a batch whose
messages straddle a window boundary adds to both windows, so the tiers agree window by
window whenever the mirror copied what the agents acknowledged. Before, a batch counted
whole in its first message's window, and neighbouring windows showed 120% and 80% where
their sum was exact.

What counts as written: a batch whose acknowledgement gives a target offset at or past the
target partition's end when this process first sent to it (:meth:`MirrorAudit.before_send`
reads that end). The target drops a copy of an idempotent producer's batch it already holds
(the agents' batches, magic 2) and answers with the offset where it lies, before that end:
such a copy is ``sent`` but not ``acked``, since the target did not append it again. A
copy the target does append (a batch without a producer id, re-copied after a restart from
an older position) counts, so the mirror's tier shows it over 100%.

Why its own records: the mirror copies the source's audit topic like any other topic, so
on the target the agents' records are copies, and a mirror that copies a stretch twice
(a restart from an older position) doubles the data *and* those copies alike; the
duplicates could not show. Its own count does: with the agents' records read on the live
cluster, mirror / agent over 100% is what it copied twice (docs/mirror.md, "Audit"). The
audit topics and the agents' heartbeats are not data and are not counted.

In preserve mode (``mode = "preserve"``, :mod:`mirror.preserve`) every batch is appended at
its own source offset or not at all, so nothing is ever appended twice: a batch counts
once its append succeeded (:meth:`MirrorAudit.appending`, :meth:`MirrorAudit.appended`).

Thread safety: :meth:`MirrorAudit.copied` runs in the copy loop, acknowledgements arrive on
the producer's threads, publishing runs on a timer thread; one lock guards the ledger.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from broker.client import (
    AGENTS_TOPIC,
    MIRROR_STAGE,
    Admin,
    AuditLedger,
    DeliveryFuture,
    Producer,
    RawBatch,
    SimpleConsumer,
    batch_windows,
)
from broker.common.errors import LogferryError, TopicExistsError, UnknownTopicOrPartitionError

log = logging.getLogger("logferry.mirror.audit")


class MirrorAudit:
    """Counts copied batches per (topic, window) and publishes due records to the target."""

    def __init__(
        self,
        producer: Producer,
        host: str,
        topic: str = "_audit.mirror",
        window_s: float = 60.0,
        admin: Admin | None = None,
        clock: Callable[[], float] = time.time,
        target: SimpleConsumer | None = None,
    ):
        self.producer = producer
        self.host = host
        self.topic = topic
        self.window_ms = max(1, int(window_s * 1000))
        self.ledger = AuditLedger(self.window_ms, stage=MIRROR_STAGE)
        self.not_data = {topic, topic.removesuffix(".mirror"), AGENTS_TOPIC}
        """Topics copied but not counted: the audit topics and the agents' heartbeats."""
        self.admin = admin
        self.clock = clock
        self.published = 0
        """Records published so far."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._topic_ready = False
        self._appends: dict[tuple[tuple[str, int], int], list[tuple[int, int]]] = {}
        """Preserve mode: (source partition, offset) -> [(window, messages)] in flight."""
        self.owns_producer = False
        """True when :meth:`for_preserve` made the producer (closed with the audit)."""
        self._floors: dict[tuple[str, int], int] = {}
        """Target partition -> its end when this process first sent to it."""
        self.target = target
        """Reads the target partitions' ends (closed with the audit); None: every ack counts."""

    # -- counting (copy loop and producer threads) --------------------------------------------

    def before_send(self, topic: str, partitions: Sequence[int]) -> None:
        """Note the end of target partitions not sent to yet (call before sending to them)."""
        if self.target is None or topic in self.not_data:
            return
        for p in partitions:
            if (topic, p) not in self._floors:
                try:
                    self._floors[(topic, p)] = self.target.offsets(topic, p).end
                except LogferryError as exc:  # a new topic, or unknown: every ack there counts
                    log.debug("mirror audit: end of %s-%d not read: %s", topic, p, exc)
                    self._floors[(topic, p)] = -1

    def copied(self, topic: str, batch: RawBatch, partitions: Sequence[int], futures: Sequence[DeliveryFuture]) -> None:
        """One source batch went to target ``partitions`` as ``futures`` (more than one
        if re-hashed)."""
        if topic in self.not_data or not futures:
            return
        windows = batch_windows(batch.raw, self.window_ms)
        with self._lock:
            for window, count in windows:
                self.ledger.sent(topic, window, count)
        state = [len(futures), True]  # sends left, all appended so far
        for p, future in zip(partitions, futures, strict=True):
            future.add_callback(partial(self._done, topic, windows, state, self._floors.get((topic, p), -1)))

    def _done(
        self, topic: str, windows: list[tuple[int, int]], state: list[Any], floor: int, future: DeliveryFuture
    ) -> None:
        with self._lock:
            state[0] -= 1
            if future.exception() is not None or (future.offset or 0) < floor:
                state[1] = False  # failed, or a copy the target held already
            if state[0] == 0:
                for window, count in windows:
                    self.ledger.finished(topic, window, count, state[1])

    # -- counting in preserve mode (batches appended at their source offsets) -----------------

    def appending(self, tp: tuple[str, int], batch: RawBatch) -> None:
        """Preserve mode: ``batch`` goes to the target at its own offset (copy loop)."""
        if tp[0] in self.not_data:
            return
        windows = batch_windows(batch.raw, self.window_ms)
        with self._lock:
            for window, count in windows:
                self.ledger.sent(tp[0], window, count)
            self._appends[(tp, batch.offset)] = windows

    def appended(self, tp: tuple[str, int], offset: int, ok: bool) -> None:
        """Preserve mode: the append of the batch at ``offset`` ended (``ok``: appended;
        an append at an offset is never appended twice, so no copy is counted twice)."""
        with self._lock:
            windows = self._appends.pop((tp, offset), None)
            for window, count in windows or ():
                self.ledger.finished(tp[0], window, count, ok)

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
            with contextlib.suppress(TopicExistsError):
                self.admin.create_topic(self.topic, partitions=1)
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
        if self.target is not None:
            self.target.close()
        if self.owns_producer:
            with contextlib.suppress(LogferryError):
                self.producer.close(timeout)
        if self.admin is not None and self.owns_producer:
            self.admin.close()

    @classmethod
    def for_preserve(cls, config: Any, host: str) -> MirrorAudit:
        """The audit of a preserve-mode mirror, which has no producer of its own: one for
        the records (and an Admin to create the audit topic), closed with the audit."""
        producer = Producer(
            zk=config.target_zk,
            tls=config.target_tls,
            sasl=config.target_sasl,
            linger_ms=0,
            client_id=f"mirror-audit-{config.group}",
        )
        try:
            admin = Admin(zk=config.target_zk, tls=config.target_tls, sasl=config.target_sasl)
        except BaseException:  # the target went away in between: no client left open
            with contextlib.suppress(LogferryError):
                producer.close(0)
            raise
        audit = cls(producer, host, config.audit_topic, config.audit_window_s, admin)
        audit.owns_producer = True
        return audit


__all__ = ["MirrorAudit"]
