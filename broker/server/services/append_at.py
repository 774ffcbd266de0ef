"""The append-at api: append a mirror's batches only where the log really ends.

Like produce (validate the batches' framing and CRCs in C, append, wake followers and
consumers, answer per ``acks``), with one condition per part: the log must end at the
part's ``expect`` offset, else nothing is appended and the answer is
:class:`OffsetMismatchError` with the log's real ends. An empty log may be started at
``expect`` when the part says ``start`` (a new target whose source's log no longer
starts at 0). A query part (``expect`` -1) appends nothing and reports the ends and the
last batch (offset, length, crc32 of its bytes) so the mirror can check that the
target's last batch is the source's. Runs synchronously as frames arrive, so one
connection's appends keep their order; the batch bytes are never re-encoded (a topic's
compression policy does not apply: the copy must stay the source's bytes), and
idempotent producers' batches are recorded in the partition's producer state without
the produce path's sequence checks.
"""

from __future__ import annotations

import zlib

from broker.common.acl import Operation
from broker.common.errors import (
    BrokerShuttingDownError,
    DiskFullError,
    InvalidRequestError,
    LogferryError,
    OffsetMismatchError,
)
from broker.server.services.produce import PendingProduce, ProduceService
from broker.server.services.responder import Responder
from broker.storage.partition_log import PartitionLog
from broker.wire import records
from broker.wire.append_at import (
    QUERY,
    AppendAtAnswerPart,
    AppendAtPart,
    AppendAtRequest,
    encode_append_at_answer,
)


class AppendAtService:
    """Conditional appends for the offset-preserving mirror (shares produce's services)."""

    def __init__(self, produce: ProduceService):
        self.produce = produce

    def handle(self, request: AppendAtRequest, responder: Responder) -> None:
        """Apply each part in order; answer as produce does for the same ``acks``."""
        p = self.produce
        if p.shutting_down():
            responder.fail(BrokerShuttingDownError("broker is shutting down"))
            return
        acks = request.acks
        results: list[AppendAtAnswerPart] = []
        waits: list[tuple[str, int, int]] = []
        replica_waits: list[tuple[str, int, int, int]] = []
        failed = False
        principal = responder.principal
        for part in request.parts:
            topic, partition = part.topic, part.partition
            try:
                # a query reveals what produce would learn; an append writes: both are produce
                p.authorizer.check_topic(principal, Operation.PRODUCE, topic)
                plog = p.router.leader_log(topic, partition, for_write=part.expect != QUERY)
                if part.expect == QUERY:
                    results.append(_query_answer(topic, partition, plog))
                    continue
                self._append(part, plog, acks)
                results.append(AppendAtAnswerPart(topic, partition, 0, plog.start_offset, plog.end_offset))
                if acks == -1:
                    replica_waits.append((topic, partition, plog.end_offset, len(results) - 1))
                if p.flush_each:
                    waits.append((topic, partition, len(results) - 1))
                else:
                    p.flusher.appended((topic, partition), plog)
            except LogferryError as exc:
                failed = True
                p.metrics.produce_errors[(("error", type(exc).__name__),)] += 1
                message = p.disk_full.refused(topic, partition, exc) if isinstance(exc, DiskFullError) else str(exc)
                start, end = getattr(exc, "start", None), getattr(exc, "end", None)
                results.append(
                    AppendAtAnswerPart(
                        topic,
                        partition,
                        exc.code,
                        -1 if start is None else start,
                        -1 if end is None else end,
                        message=message,
                    )
                )
        rejected = request.rejected
        if rejected is not None:
            failed = True
            results.append(
                AppendAtAnswerPart(
                    rejected.topic, rejected.partition, rejected.error.code, -1, -1, message=str(rejected.error)
                )
            )
        if acks == 0:
            responder.count(failed)
            if failed:  # acks=0 cannot report errors: closing tells the client
                responder.close_connection()
            return
        if not waits and not replica_waits:
            responder.answer(encode_append_at_answer(results), error=failed)
            return
        pending = PendingProduce(
            results, lambda parts, failed: responder.answer(encode_append_at_answer(parts), error=failed)
        )
        for topic, partition, end, index in replica_waits:
            if p.replication.wait_for_replicas(topic, partition, end, pending, index):
                pending.left += 1
        for topic, partition, index in waits:
            written = p.logs.get(topic, partition)
            assert written is not None  # appended to a moment ago, on this event loop turn
            pending.left += 1
            p.flusher.ack_after_flush((topic, partition), written, pending, index)
        pending.part_done(None)

    def _append(self, part: AppendAtPart, plog: PartitionLog, acks: int) -> None:
        p = self.produce
        topic, partition, expect = part.topic, part.partition, part.expect
        scan = records.validate_message_set(part.data)
        if not scan.messages and len(part.data):
            raise InvalidRequestError(f"append_at to {topic}-{partition}: no whole batch")
        if acks == -1:
            p.replication.check_acks_all(topic, partition)
        end = plog.end_offset
        if expect != end:
            if part.start and plog.start_offset == end and expect > end:
                plog.restart_at(expect)  # an empty log starts where its source starts
            else:
                raise OffsetMismatchError(
                    f"{topic}-{partition} ends at offset {end}, not {expect}: nothing "
                    f"appended (the log starts at {plog.start_offset})",
                    start=plog.start_offset,
                    end=end,
                )
        if not len(part.data):
            return
        # Recorded, not checked (as a follower records its leader's appends): the exact
        # offset already excludes a repeat, and a copy may start anywhere in the source.
        plog.append(part.data, scan.messages, scan.producers, scan.txns)
        key = (topic, partition)
        p.metrics.bytes_in[key] += len(part.data)
        p.metrics.messages_in[key] += scan.messages
        if key in p.fetch.append_waiters:
            p.fetch.wake_fetchers(key)


def _query_answer(topic: str, partition: int, plog: PartitionLog) -> AppendAtAnswerPart:
    last = plog.last_batch()
    if last is None:
        return AppendAtAnswerPart(topic, partition, 0, plog.start_offset, plog.end_offset)
    offset, data = last
    return AppendAtAnswerPart(
        topic, partition, 0, plog.start_offset, plog.end_offset, offset, len(data), zlib.crc32(data)
    )


__all__ = ["AppendAtService"]
