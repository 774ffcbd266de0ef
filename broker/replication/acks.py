"""acks=all: refusing, holding and answering produce requests that wait for the ISR.

A leader appends an acks=all batch at once but answers only when every member of
the ack set (:meth:`.isr.LeaderTracker.ack_set`) has fetched past it. Before
appending, a partition with fewer in-sync replicas than ``min_insync_replicas``
refuses the batch (nothing is written). Afterwards the answer waits in the
replica's ``pending_acks`` until one of three things happens:

* the replicated end passes the batch: success (:func:`release`);
* ``acks_all_timeout_ms`` passes first: an error saying the batch was appended
  but may or may not be kept (:func:`expire`);
* the broker stops leading (or stops): the same kind of error (:func:`fail`).

Sans IO: these functions act on a :class:`.roles.Replica` and call the waiting
produce's ``part_done``; times are monotonic seconds passed in by the caller.

Each leader epoch's acks=all answers are also noted as a span
(:class:`.roles.AnswerSpan`, :func:`answered`): two log lines per epoch a broker leads,
``<topic>-<p>: acks=all answers in leader epoch <e> began at <unix time>`` at the
first answer and ``... ended at <unix time> (<n> answered)`` when the broker stops
leading or leads in another epoch. An operator reads when a partition's leaders
took over and let go; the nemesis checker (tests/support/checker.py) reads from
them, all brokers sharing one clock in a test, that no two brokers answered for
one partition in one epoch and how far two leaders' answers overlapped. Not per
batch: one clock reading per :func:`release` that answers something.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from broker.common.errors import (
    LogferryError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
)
from broker.replication.isr import LeaderTracker
from broker.replication.roles import AnswerSpan, Replica

log = logging.getLogger("logferry.replication")


def answered(replica: Replica, count: int) -> None:
    """``count`` acks=all answers were just given: extend this epoch's span (a new one,
    logged, at the first answer of an epoch; the last epoch's logged as ended)."""
    now = time.time()
    span = replica.answered
    if span is None or span.epoch != replica.epoch:
        end_span(replica)
        span = replica.answered = AnswerSpan(replica.epoch, now)
        log.info("%s-%d: acks=all answers in leader epoch %d began at %.3f", *replica.key, span.epoch, now)
    span.last = now
    span.count += count


def end_span(replica: Replica) -> None:
    """Log the end of the current span of answers, if any (leadership ends or moves on)."""
    span, replica.answered = replica.answered, None
    if span is not None:
        log.info(
            "%s-%d: acks=all answers in leader epoch %d ended at %.3f (%d answered)",
            *replica.key,
            span.epoch,
            span.last,
            span.count,
        )


def check_min_insync(replica: Replica) -> None:
    """Refuse an acks=all produce before appending when too few replicas are in sync."""
    topic, partition = replica.key
    isr = replica.tracker.isr if replica.tracker is not None else ()
    if len(isr) < replica.min_insync:
        raise NotEnoughReplicasError(
            f"partition {topic}-{partition} has {len(isr)} in-sync replicas {list(isr)}, "
            f"fewer than min_insync_replicas={replica.min_insync}: acks=all is refused "
            "(nothing was written)"
        )


def wait(replica: Replica, end: int, pending: Any, index: int, timeout_ms: int) -> bool:
    """Hold an acks=all answer until the ISR has ``end``; False if it already has."""
    if acked(replica, end):
        answered(replica, 1)
        return False
    deadline = time.monotonic() + timeout_ms / 1000
    replica.pending_acks.append((end, pending, index, deadline))
    return True


def acked(replica: Replica, end: int) -> bool:
    return end <= acked_end(replica)


def acked_end(replica: Replica) -> int:
    """Where acks=all answers may be given up to (-1: none, too few in sync)."""
    return ack_limit(replica.tracker, replica.plog.end_offset, replica.min_insync)


def ack_limit(tracker: LeaderTracker | None, leader_end: int, min_insync: int) -> int:
    """The acks=all rule: a batch ending at or below the returned offset may be
    answered; -1 (none) when the committed ISR is smaller than ``min_insync``."""
    if tracker is None or len(tracker.isr) < min_insync:
        return -1
    return tracker.replicated_end(leader_end)


def release(replica: Replica) -> None:
    """Answer every waiting batch the ack set now holds."""
    if replica.pending_acks:
        end = acked_end(replica)  # once, not per waiting answer
        keep = []
        for item in replica.pending_acks:
            if item[0] <= end:
                item[1].part_done(item[2])
            else:
                keep.append(item)
        if len(keep) < len(replica.pending_acks):
            answered(replica, len(replica.pending_acks) - len(keep))
        replica.pending_acks = keep


def expire(replica: Replica, now: float, timeout_ms: int) -> None:
    """Fail the waiting batches whose deadline passed (``timeout_ms`` is only named in
    the message)."""
    keep = []
    for item in replica.pending_acks:
        if item[3] <= now:
            isr = list(replica.tracker.isr) if replica.tracker else []
            item[1].part_done(
                item[2],
                NotEnoughReplicasAfterAppendError(
                    f"{replica.key[0]}-{replica.key[1]}: the in-sync replicas {isr} did not "
                    f"all confirm the batch within {timeout_ms} ms "
                    f"(min_insync_replicas={replica.min_insync}); it was appended by the "
                    "leader and may or may not be kept"
                ),
            )
        else:
            keep.append(item)
    replica.pending_acks = keep


def fail(replica: Replica, error: LogferryError, me: int) -> None:
    """Fail every waiting batch: broker ``me`` no longer leads (``error`` says why)."""
    end_span(replica)
    pending, replica.pending_acks = replica.pending_acks, []
    for _, waiting, index, _ in pending:
        waiting.part_done(
            index,
            NotEnoughReplicasAfterAppendError(
                f"{error}; the batch was appended by broker {me} but not confirmed by "
                "every in-sync replica: it may or may not be kept"
            ),
        )


__all__ = [
    "ack_limit",
    "acked",
    "acked_end",
    "answered",
    "check_min_insync",
    "end_span",
    "expire",
    "fail",
    "release",
    "wait",
]
