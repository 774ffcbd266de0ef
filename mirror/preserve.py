"""The offset-preserving copy loop (``mode = "preserve"``, the default).

Each target partition is a byte-identical copy of its source partition: the same
batches at the same byte offsets. Every batch goes to the target leader as an
append-at (:class:`broker.client.Appender`): appended only if the target's log ends
exactly at the batch's source offset. The mirror's position is therefore the target's
own log end, not a committed source position:

    owned partition -> ask the target leader where its log ends (and for its last batch)
                    -> check it against the source (:mod:`mirror.resume`)
                    -> seek the source fetch there -> copy batch after batch, pipelined

A killed, restarted or stalled mirror, a lost answer or a target leader change copies
nothing twice: an append that fails for any reason sends its partition back to the
query (:mod:`mirror.positions`), and the appends behind it in the pipeline mismatch
and are dropped. While the target is away, the partitions waiting for that query are
paused and one of them asks per backoff interval (:mod:`mirror.outage`); the first
answer resumes them all. A target that is no copy of its source (written by someone
else, a batch that differs, retention on one side only) stops that partition, loudly (log,
``mirror status``, metric ``logferry_mirror_diverged_total``); nothing is spliced.

The group still commits source positions (what the target acknowledged), but only so
``mirror status`` and ``group describe`` show the lag; resuming never reads them.
Target topics are created with the source's partition count; a target topic with
another count stops its partitions (use ``mode = "produce"`` to re-hash instead).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from broker.client import (
    AppendAtPart,
    Appender,
    PartitionNotOwnedError,
    RawBatch,
)
from broker.common.errors import (
    AuthorizationError,
    InvalidOffsetError,
    LogferryError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
)
from mirror.audit import MirrorAudit
from mirror.config import MirrorConfig
from mirror.errors import DeliveryFailedError, MirrorError
from mirror.lifecycle import MirrorLoop, TopicPartition
from mirror.outage import is_transient
from mirror.positions import HALTED, Positions
from mirror.resume import TargetEnd, batch_differs, plan_resume
from mirror.routing import Router

log = logging.getLogger("logferry.mirror")

ASSIGNMENT_EVERY_S = 0.5
"""How often revoked partitions are forgotten (new ones are noticed by their batches)."""

PROBE_S = 2.0
"""How long one ask for a target partition's end retries by itself (a leader election)
before the target counts as away (then mirror/outage.py paces the next tries)."""

SOURCE_CATCH_UP_S = 15.0
"""How long a target that ends past the source's visible end waits for the source (a
source leader change) before it counts as diverged."""


class PreservingMirror(MirrorLoop):
    """One mirror process in offset-preserving mode; same lifecycle as :class:`mirror.core.Mirror`."""

    mode = "preserve"

    def __init__(self, config: MirrorConfig):
        super().__init__(config)
        self.positions = Positions()
        self._appender: Appender | None = None
        self._router: Router | None = None
        self._events: deque[tuple[Any, ...]] = deque()
        """From other threads: ("done", tp, generation, offset, error) and ("gap", tp, ...)."""
        self._checked_topics: dict[str, tuple[str | None, int]] = {}
        """Topic -> (why its partitions cannot be copied or None, the source's count then)."""
        self._last_assignment = 0.0

    # -- lifecycle (mirror/lifecycle.py) -----------------------------------------------------

    def _connect(self) -> None:
        cfg = self.config
        assert self._source is not None and self._admin is not None
        self._appender = Appender(
            cfg.target_zk,
            acks=cfg.target_acks,
            request_timeout=cfg.request_timeout_s,
            max_request_bytes=cfg.max_request_bytes,
            tls=cfg.target_tls,
            sasl=cfg.target_sasl,
            listener=cfg.target_listener,
        )
        self._router = Router(self._source, self._admin)

    def _make_audit(self, member: str) -> MirrorAudit:
        return MirrorAudit.for_preserve(self.config, member)

    def _tend(self, now: float) -> None:
        """Follow the group's assignment, resume partitions that need it, expire appends
        a stalled target never answered."""
        assert self._appender is not None
        if now - self._last_assignment >= ASSIGNMENT_EVERY_S:
            self._last_assignment = now
            self._sync_assignment()
        for topic in self.refusals.due(now):  # refused for an ACL: try again
            self._checked_topics.pop(topic, None)
            for tp in [tp for tp in self.positions.parts if tp[0] == topic]:
                self.positions.retry(tp)
        for tp in self.positions.needs_resync():
            self._resync(tp)
        self._appender.expire()

    def _inflight_bytes(self) -> int:
        return self.positions.inflight_bytes

    def _close_target(self) -> None:
        if self._appender is not None:
            self._appender.close()
            self._appender = None

    # -- the pipeline ------------------------------------------------------------------------

    def _send(self, batches: list[tuple[TopicPartition, RawBatch]]) -> None:
        """Append each batch at its source offset, if it is the next of its partition.

        A partition's consecutive batches of one poll travel as one part (one append on
        the target, as the producer sends a partition's batches: far less broker CPU
        than a part per batch), cut at ``max_request_bytes``.
        """
        assert self._appender is not None
        positions = self.positions
        limit = self.config.max_request_bytes
        runs: dict[TopicPartition, list[tuple[int, bool, list[RawBatch], int]]] = {}
        for tp, batch in batches:
            if tp not in positions.parts:
                positions.track(tp)
                self._resync(tp)
            accepted = positions.accept(tp, batch.offset, batch.next_offset, batch.count, len(batch.raw))
            if accepted is None:
                continue  # stale (fetched before the seek to the target's end) or halted
            generation, start_flag = accepted
            if self._audit is not None:
                self._audit.appending(tp, batch)
            chunks = runs.setdefault(tp, [])
            if chunks and chunks[-1][0] == generation and chunks[-1][3] + len(batch.raw) <= limit:
                gen, flag, raws, size = chunks[-1]
                raws.append(batch)
                chunks[-1] = (gen, flag, raws, size + len(batch.raw))
            else:
                chunks.append((generation, start_flag, [batch], len(batch.raw)))
        parts: list[AppendAtPart] = []
        sent: dict[int, tuple[int, list[int]]] = {}
        for tp, chunks in runs.items():
            for generation, start_flag, raws, _ in chunks:
                data = raws[0].raw if len(raws) == 1 else b"".join(b.raw for b in raws)
                part = AppendAtPart(tp[0], tp[1], raws[0].offset, data, start_flag)
                sent[id(part)] = (generation, [b.offset for b in raws])
                parts.append(part)
        if parts:
            self._appender.send(parts, lambda part, error, answer: self._on_done(part, *sent[id(part)], error))

    def _on_done(self, part: AppendAtPart, generation: int, offsets: list[int], error: LogferryError | None) -> None:
        """Reader thread: queue the outcome (for each batch of the part) for the copy loop."""
        self._events.append(("done", (part.topic, part.partition), generation, offsets, error))
        self._wake.set()

    def _settle(self) -> None:
        """Apply the appends' outcomes: acknowledged positions, partitions to resync."""
        self._wake.clear()
        positions = self.positions
        acked: dict[TopicPartition, int] = {}
        per_topic: dict[str, list[int]] = {}
        events = self._events
        while events:
            event = events.popleft()
            if event[0] == "gap":
                _, tp, offset, log_start = event
                self._diverged(
                    tp,
                    f"the source's log now starts at {log_start}, past the "
                    f"mirror's position {offset}: retention on the source deleted "
                    f"{log_start - offset} bytes before they were copied",
                )
                continue
            _, tp, generation, offsets, error = event
            if (
                isinstance(error, AuthorizationError)
                and positions.parts.get(tp) is not None
                and generation == positions.parts[tp].generation
            ):
                self._refuse_topic(tp[0], error)  # that topic only; the loop goes on
            if (
                error is not None
                and not error.retriable
                and not isinstance(error, OffsetMismatchError)
                and positions.parts.get(tp) is not None
                and generation == positions.parts[tp].generation
            ):
                raise DeliveryFailedError(
                    f"the target refused the batches of {tp[0]}-{tp[1]} from offset "
                    f"{offsets[0]} for good ({type(error).__name__}: {error}); nothing after "
                    "them was copied"
                )
            if (
                error is not None
                and positions.parts.get(tp) is not None
                and generation == positions.parts[tp].generation
            ):
                log.info(
                    "mirror: %s-%d: append at %d failed (%s); resuming from the target's log end",
                    tp[0],
                    tp[1],
                    offsets[0],
                    error,
                )
            for offset in offsets:  # a failure sends the partition to resync at the first
                if self._audit is not None:
                    self._audit.appended(tp, offset, error is None)
                result = positions.outcome(tp, generation, offset, error is None)
                if result is not None:
                    if self.refusals.topics:
                        self._granted(tp[0])
                    acked[tp] = result.position
                    counts = per_topic.setdefault(tp[0], [0, 0, 0])
                    counts[0] += 1
                    counts[1] += result.done.messages
                    counts[2] += result.done.nbytes
        if acked and self._consumer is not None:
            self._consumer.acknowledge_batches(acked)
        for topic, (nb, nm, nbytes) in per_topic.items():
            self.metrics.record(topic, nb, nm, nbytes)

    def _drain(self) -> None:
        """Stopping: wait (bounded) for the appends in flight, so the commits show them."""
        self._settle()
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        while self.positions.inflight_bytes and time.monotonic() < deadline:
            self._wake.wait(min(0.2, max(deadline - time.monotonic(), 0)))
            self._settle()
            assert self._appender is not None
            self._appender.expire()

    # -- where to resume ---------------------------------------------------------------------

    def _sync_assignment(self) -> None:
        assert self._consumer is not None
        owned = set(self._consumer.assignment())
        for tp in list(self.positions.parts):
            if tp not in owned:
                self.positions.forget(tp)
        for tp in owned:
            self.positions.track(tp)

    def _resync(self, tp: TopicPartition) -> None:
        """Learn the target's end, check it against the source, seek the source there."""
        assert self._appender is not None and self._source is not None
        assert self._consumer is not None
        if self.positions.state(tp) == HALTED:
            return
        topic, partition = tp
        if self.refusals.halted(topic):
            self.positions.refuse(tp)
            self._consumer.pause(topic, partition)
            return
        if not self.outage.may_try():  # the target is away: one probe per backoff interval
            self._consumer.pause(topic, partition)  # fetched again by the seek below, later
            return
        step = "prepare topic"
        try:
            problem = self._check_topic(topic, partition)
            if problem is None:
                step = "query end"
                answer = self._appender.query(topic, partition, deadline_s=min(PROBE_S, self.config.delivery_timeout_s))
        except AuthorizationError as exc:
            self._refuse_topic(topic, exc)
            return
        except (LogferryError, OSError) as exc:
            if not is_transient(exc):
                what = (
                    f"cannot prepare target topic {topic!r}"
                    if step == "prepare topic"
                    else f"cannot learn where {topic}-{partition} ends on the target"
                )
                raise MirrorError(f"{what}: {exc}") from exc
            self.outage.failed(step, exc)  # raises once the outage outlasts delivery_timeout_s
            self._consumer.pause(topic, partition)  # stays in resync; tried again after the backoff
            return
        self.outage.ok()
        if problem is not None:
            self._diverged(tp, problem)
            return
        try:
            source = self._source.offsets(topic, partition)
        except LogferryError as exc:
            raise MirrorError(f"cannot learn where {topic}-{partition} ends on the source: {exc}") from exc
        target = TargetEnd(answer.start, answer.end, answer.last, answer.last_len, answer.last_crc)
        plan = plan_resume(target, source.start, source.end, self.config.start, self.config.on_gap)
        waited = 0.0
        while plan.diverged and target.end > source.end and waited < SOURCE_CATCH_UP_S and not self.stopping.is_set():
            # A new source leader's visible end may trail its predecessor's for a moment:
            # give it time before calling the target ahead of the source.
            time.sleep(0.5)
            waited += 0.5
            try:
                source = self._source.offsets(topic, partition)
            except LogferryError:
                continue
            plan = plan_resume(target, source.start, source.end, self.config.start, self.config.on_gap)
        problem = plan.diverged
        if problem is None and plan.verify_last:
            problem = batch_differs(target, self._source_batch(topic, partition, target.last))
        if problem is None and plan.check_boundary:
            problem = self._not_a_boundary(topic, partition, plan.position)
        if problem is not None:
            self._diverged(tp, problem)
            return
        try:
            self._consumer.seek(topic, partition, plan.position)
        except PartitionNotOwnedError:
            self.positions.forget(tp)
            return
        self.positions.resynced(tp, plan.position, plan.start_flag)
        log.info(
            "mirror: %s-%d resumes at the target's end %d%s",
            topic,
            partition,
            plan.position,
            " (an empty target starting there)" if plan.start_flag else "",
        )

    def _source_batch(self, topic: str, partition: int, offset: int) -> bytes | None:
        assert self._source is not None
        try:
            result = self._source.fetch(topic, partition, offset, max_bytes=1, keep_raw=True)
        except (InvalidOffsetError, OffsetOutOfRangeError):
            return None
        if not result.batches or result.batches[0].raw is None:
            return None
        return bytes(result.batches[0].raw)

    def _not_a_boundary(self, topic: str, partition: int, offset: int) -> str | None:
        if self._source_batch(topic, partition, offset) is None:
            return (
                f"the target ends at {offset}, which is no batch boundary of the source: "
                "the target was written by someone else"
            )
        return None

    def _check_topic(self, topic: str, partition: int) -> str | None:
        """Create the target topic like the source if missing, grow it when the source
        grew (a partition past the count last seen), refuse other partition counts."""
        checked = self._checked_topics.get(topic)
        if checked is not None and partition < checked[1]:
            return checked[0]
        assert self._router is not None
        # errors go to _resync: an ACL refusal halts the topic, an outage waits
        source_n, target_n = self._router.counts(topic, partition)
        problem = None
        if source_n != target_n:
            problem = (
                f"target topic {topic!r} has {target_n} partitions and the source "
                f"{source_n}: an offset-preserving copy needs the same count (give the "
                f'target topic {source_n} partitions, or set mode = "produce" to '
                "re-hash)"
            )
        self._checked_topics[topic] = (problem, source_n)
        return problem

    def _refuse_topic(self, topic: str, error: LogferryError) -> None:
        """The target refused ``topic`` (an ACL): its partitions stop, and resync from
        the target's end when :attr:`refusals` says to try again."""
        self._refuse(topic, error)
        for tp in [tp for tp in self.positions.parts if tp[0] == topic]:
            self.positions.refuse(tp)

    def _diverged(self, tp: TopicPartition, reason: str) -> None:
        if self.positions.state(tp) == HALTED:
            return
        self.positions.halt(tp, reason)
        self.metrics.diverged[(("topic", tp[0]), ("partition", str(tp[1])))] += 1
        self.metrics.halted[tp] = {"diverged": reason}
        log.error(
            "MIRROR PARTITION DIVERGED: %s-%d: %s. Nothing was spliced; the partition "
            "stops until the target is repaired (delete and recreate the target topic to "
            "copy it again) and the mirror restarts.",
            tp[0],
            tp[1],
            reason,
        )

    def _on_gap(self, topic: str, partition: int, offset: int, log_start: int) -> bool:
        """Fetcher thread: the source deleted the position the target ends at."""
        self._events.append(("gap", (topic, partition), offset, log_start))
        self._wake.set()
        return False


__all__ = ["PreservingMirror"]
