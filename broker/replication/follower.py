"""The follower's side: applying what a replica fetch brought back.

The :class:`.fetcher.ReplicaFetcher` does the IO (one connection per leader); this
module decides what each partition's part of an answer means for the local log:

* normally the bytes are appended as they are (after a CRC scan, so replicas stay
  byte-identical) and the high watermark follows the leader's;
* a replica that was away first *reconciles*: it compares its log with the
  leader's from its last known high watermark on (:mod:`.reconcile`) and truncates
  what the leader does not have before it appends anything;
* an error from the leader moves the fetch position: the leader's log starts past
  ours (retention), ends before ours (we are ahead), or does not have a batch
  boundary where we fetch (the logs differ before it);
* a leader whose log starts inside a segment (records deleted up to a message,
  Kafka's DeleteRecords) says so in every answer, and the follower moves its own start
  there, so the same records are hidden on every replica and after a leader change.

Runs on the event loop; the only things it needs from the broker are the two hooks
in :class:`.services.ReplicationServices` that count replicated and truncated bytes.
"""

from __future__ import annotations

import logging
import time

from broker.common.errors import InvalidOffsetError, OffsetOutOfRangeError, ProtocolError, StorageError
from broker.replication.reconcile import reconcile_step
from broker.replication.roles import FOLLOWER, Replica
from broker.replication.services import ReplicationServices
from broker.wire import records
from broker.wire.fetch import ReplicaFetchAnswerPart

log = logging.getLogger("logferry.replication")


class FollowerApplier:
    """Applies fetched bytes, errors and reconcile answers to a follower's log."""

    def __init__(self, services: ReplicationServices):
        self.services = services

    @staticmethod
    def fetch_position(replica: Replica) -> int:
        """Where the next fetch for ``replica`` starts."""
        return replica.reconcile_at if replica.reconcile_at is not None else replica.plog.end_offset

    def on_fetched(
        self, replica: Replica, epoch: int, offset: int, result: ReplicaFetchAnswerPart, data: memoryview
    ) -> None:
        """Apply one partition's part of a replica fetch response."""
        if replica.role != FOLLOWER or replica.epoch != epoch or self.fetch_position(replica) != offset:
            return  # the role or the log moved on while the fetch was out
        plog = replica.plog
        code, message, start, hw, leo = (result.error, result.message, result.start, result.visible_end, result.log_end)
        now = time.monotonic()
        if code:
            self._fetch_error(replica, offset, code, message, start, leo, now, result)
            return
        if hw is None or leo is None:  # a leader's answer without an error carries both
            raise ProtocolError(
                f"{replica.key[0]}-{replica.key[1]}: the leader's fetch answer "
                "has no error, yet no high watermark or log end"
            )
        if replica.reconcile_at is not None:
            self._reconcile(replica, offset, data, leo)
            return
        scan = records.scan(data)
        if scan.valid_bytes:
            try:
                plog.append(data[: scan.valid_bytes], scan.messages, scan.producers, scan.txns)
            except StorageError as exc:
                log.error("%s-%d: follower cannot append: %s", *replica.key, exc)
                replica.retry_at = now + 1.0
                return
            self.services.replicated_in(replica.key, scan.valid_bytes, scan.messages)
        elif scan.error and not scan.error.startswith("torn"):
            log.error(
                "%s-%d: leader sent a bad batch at offset %d (%s); retrying in 1s", *replica.key, offset, scan.error
            )
            replica.retry_at = now + 1.0
        plog.set_high_watermark(min(hw, plog.end_offset))
        if result.start_message is not None and start is not None and result.start_message > plog.start_message:
            try:
                plog.advance_start(start, result.start_message)
            except StorageError as exc:
                log.error("%s-%d: follower cannot move its log start: %s", *replica.key, exc)

    def _fetch_error(
        self,
        replica: Replica,
        offset: int,
        code: int,
        message: str | None,
        start: int | None,
        leo: int | None,
        now: float,
        moved: ReplicaFetchAnswerPart | None = None,
    ) -> None:
        plog = replica.plog
        name = f"{replica.key[0]}-{replica.key[1]}"
        if code == OffsetOutOfRangeError.code and start is not None and offset < start:
            log.warning(
                "%s: the leader's log starts at %d, past this follower's end %d "
                "(retention deleted it there): restarting the log empty",
                name,
                start,
                offset,
            )
            if moved is not None and moved.start_batch_message is not None:
                # the leader's count at its start batch; its start inside that batch is
                # taken from the next answer, once the batch is here
                plog.restart_at(start, moved.start_batch_message)
            else:
                plog.restart_at(start)
            replica.reconcile_at = None
        elif code == OffsetOutOfRangeError.code and leo is not None and offset > leo:
            replica.reconcile_at = plog.batch_start_at_or_before(leo)
            log.warning(
                "%s: this follower is ahead of its leader (%d > %d): comparing from %d",
                name,
                offset,
                leo,
                replica.reconcile_at,
            )
        elif code == InvalidOffsetError.code:
            back = plog.batch_start_at_or_before(max(offset - 1, plog.start_offset))
            log.warning(
                "%s: offset %d is no batch boundary on the leader: the logs differ before it; comparing from %d",
                name,
                offset,
                back,
            )
            replica.reconcile_at = back if back < offset else None
            if back >= offset:
                plog.truncate_to(back)
        else:
            log.info("%s: fetch from leader failed: %s", name, message)
            replica.retry_at = now + 0.2

    def _reconcile(self, replica: Replica, offset: int, data: memoryview, leo: int) -> None:
        plog = replica.plog
        local = plog.read_bytes(offset, len(data)) if len(data) else b""
        at, done = reconcile_step(offset, data, local, leo, plog.end_offset)
        if done:
            replica.reconcile_at = None
            if at < plog.end_offset:
                cut = plog.truncate_to(at)
                self.services.truncated_bytes[()] += cut
                log.warning(
                    "%s-%d: log agrees with the leader up to %d only; cut the %d "
                    "bytes after it that the leader does not have",
                    *replica.key,
                    at,
                    cut,
                )
            else:
                log.info("%s-%d: log agrees with the leader up to %d; fetching from there", *replica.key, at)
        else:
            replica.reconcile_at = at


__all__ = ["FollowerApplier"]
