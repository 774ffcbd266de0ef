"""Making appended bytes durable and visible, and deleting old segments.

The paper's flush policy: fsync a partition after ``flush.messages`` messages or
``flush.ms`` milliseconds, whichever comes first. fsync runs in a worker thread so the
event loop keeps appending while the disk syncs; when it ends, the visible end moves,
waiting consumers are woken and produces held for the fsync (``flush_messages = 1``)
are answered. Retention is the broker's only deletion: whole segments, by age or size.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from typing import Callable, Protocol

from broker.common.errors import LogferryError
from broker.server.broker_metrics import PartitionCounter
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PartitionLog

log = logging.getLogger("logferry.broker")

Key = tuple[str, int]


class FlushWaiter(Protocol):
    """An answer held until an fsync covers its bytes."""

    def part_done(self, index: int | None, error: LogferryError | None = None) -> None: ...


def now_ms() -> int:
    """Wall-clock milliseconds (flush and retention deadlines are wall-clock)."""
    return int(time.time() * 1000)


class Flusher:
    """fsyncs partitions by the flush policy and reports each flushed end."""

    def __init__(self, logs: LogManager, flush_ms: int, fsync_pool: Executor,
                 wake_consumers: Callable[[Key], None], on_flushed: Callable[[Key], None]):
        """After an fsync moved a partition's visible end: ``wake_consumers(key)``,
        then the held produce answers, then ``on_flushed(key)`` (replication)."""
        self.logs = logs
        self.flush_ms = flush_ms
        self.fsync_pool = fsync_pool
        self._wake_consumers = wake_consumers
        self._on_flushed = on_flushed
        self._flushing: set[Key] = set()
        self._ack_after_flush: dict[Key, list[tuple[int, FlushWaiter, int]]] = {}

    def schedule(self, key: Key, plog: PartitionLog) -> None:
        """Flush ``key`` soon, unless a flush of it is already running."""
        if key in self._flushing:
            return
        self._flushing.add(key)
        asyncio.get_running_loop().create_task(self.flush(key, plog))

    def maybe_schedule(self, key: Key, plog: PartitionLog) -> None:
        """Flush ``key`` if the flush policy says it is due."""
        if plog.flush_due(now_ms()):
            self.schedule(key, plog)

    def ack_after_flush(self, key: Key, plog: PartitionLog, waiter: FlushWaiter,
                        index: int) -> None:
        """Settle ``waiter``'s part ``index`` once everything appended so far is fsynced."""
        self._ack_after_flush.setdefault(key, []).append((plog.end_offset, waiter, index))
        self.schedule(key, plog)

    async def flush(self, key: Key, plog: PartitionLog) -> None:
        """fsync in a worker thread, then advance the visible end and wake fetchers."""
        self._flushing.add(key)
        try:
            while True:
                pending = plog.prepare_flush()
                try:
                    await asyncio.get_running_loop().run_in_executor(self.fsync_pool, pending.run)
                except OSError as exc:
                    log.error("fsync of %s-%d failed: %s", key[0], key[1], exc)
                    return
                plog.mark_flushed(pending.end)
                self._flushed_to(key, plog.flushed_end)
                self._on_flushed(key)
                # flush.messages=1 acks that arrived during this fsync need one more pass
                if not any(item[0] > plog.flushed_end
                           for item in self._ack_after_flush.get(key, ())):
                    break
        finally:
            self._flushing.discard(key)

    def _flushed_to(self, key: Key, flushed_end: int) -> None:
        self._wake_consumers(key)
        acks = self._ack_after_flush.get(key)
        if not acks:
            return
        keep = []
        for end, waiter, index in acks:
            if end <= flushed_end:
                waiter.part_done(index)
            else:
                keep.append((end, waiter, index))
        if keep:
            self._ack_after_flush[key] = keep
        else:
            del self._ack_after_flush[key]

    async def run(self) -> None:
        """Flush every partition whose flush is due, for ever (a background task)."""
        tick = min(max(self.flush_ms / 4000, 0.005), 0.1)
        while True:
            await asyncio.sleep(tick)
            now = now_ms()
            for key, plog in self.logs.logs():
                if key not in self._flushing and plog.flush_due(now):
                    self.schedule(key, plog)


async def run_retention(logs: LogManager, interval_ms: int,
                        segments_deleted: PartitionCounter) -> None:
    """Roll segments by age and delete those past retention, for ever (a background
    task); a partition that fails is logged and tried again next round."""
    interval = interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        now = now_ms()
        for key, plog in list(logs.logs()):
            try:
                plog.maybe_roll(now)
                deleted = plog.enforce_retention(now)
            except LogferryError as exc:
                log.error("retention on %s-%d failed: %s", key[0], key[1], exc)
                continue
            if deleted:
                segments_deleted[key] += len(deleted)


__all__ = ["Flusher", "FlushWaiter", "now_ms", "run_retention"]
