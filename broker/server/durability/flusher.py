"""Making appended bytes durable and visible, and deleting old segments.

Two flush policies (``[log] group_commit``, docs/configuration.md):

- group commit (the default): every append asks for a commit of its log dir; one
  round of fsyncs runs at a time per log dir and covers every partition appended to
  before it started, and the next round starts as soon as it ends (the bookkeeping is
  :class:`broker.server.durability.group_commit.CommitQueue`). Data is visible one fsync after it
  was appended, and the fsync rate adapts to the load: no timer.
- the paper's policy: fsync a partition after ``flush.messages`` messages or
  ``flush.ms`` milliseconds, whichever comes first.

Either way fsync runs in another thread (group commit: one per log dir,
:mod:`broker.server.durability.sync_thread`) so the event loop keeps appending while the disk
syncs, except one case: a group-commit round of one file on an idle log dir runs on the
loop itself (see :func:`~broker.server.durability.group_commit.inline_round`: two thread wake-ups
cost more than the fsync there), and only when it returned does the visible end move (consumers never read
bytes a crash could take back): then waiting consumers are woken, produces held for the
fsync (``flush_messages = 1``) are answered and replication hears of it. Retention is
the broker's only deletion: whole segments, by age or size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Protocol

from broker.common.background import BackgroundTasks
from broker.common.errors import LogferryError, StorageError
from broker.server.broker_metrics import PartitionCounter
from broker.server.durability.group_commit import CommitQueue, FsyncTimes, inline_round, next_round_pause
from broker.server.durability.sync_thread import SyncThread
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PartitionLog, PendingFlush
from broker.storage.sync import SYNCFS, SYNCFS_MIN_FILES, open_fs_fd, sync_round

log = logging.getLogger("logferry.broker")

Key = tuple[str, int]
SyncAll = Callable[[Sequence[PendingFlush], int | None], list[OSError | None]]


class FlushWaiter(Protocol):
    """An answer held until an fsync covers its bytes."""

    def part_done(self, index: int | None, error: LogferryError | None = None) -> None: ...


IDLE_SCAN_S = 1.0
"""How long the flusher's loop sleeps while no partition holds unflushed bytes, unless an
append wakes it first (a backstop for bytes that reached a log some other way)."""


def now_ms() -> int:
    """Wall-clock milliseconds (flush and retention deadlines are wall-clock)."""
    return int(time.time() * 1000)


class Flusher:
    """fsyncs partitions by the flush policy and reports each flushed end."""

    def __init__(
        self,
        logs: LogManager,
        flush_ms: int,
        fsync_pool: Executor,
        wake_consumers: Callable[[Key], None],
        on_flushed: Callable[[Key], None],
        group_commit: bool | None = None,
        sync: SyncAll = sync_round,
        inline: bool | None = None,
        background: BackgroundTasks | None = None,
    ):
        """After an fsync moved a partition's visible end: ``wake_consumers(key)``,
        then the held produce answers, then ``on_flushed(key)`` (replication).
        ``group_commit`` None: as the logs' config says. ``sync`` runs a round's
        fsyncs in the pool (:func:`broker.storage.sync.sync_round`; tests pass one
        that blocks). ``inline``: whether a round of one file on an idle log dir may
        fsync on the event loop (None: with the default ``sync`` only; a test's own sync
        may block on the test). ``background``: where its flush tasks run (the broker's,
        so that a crashed flush stops it; None: its own, which only logs)."""
        self.logs = logs
        self._background = background if background is not None else BackgroundTasks()
        self.inline = sync is sync_round if inline is None else inline
        self._fsync_times: dict[Hashable, FsyncTimes] = {}
        """Per log dir, recent fsync durations and when its last round ended."""
        self.flush_ms = flush_ms
        self.fsync_pool = fsync_pool
        self.group_commit = logs.config.group_commit if group_commit is None else group_commit
        self._sync = sync
        self._wake_consumers = wake_consumers
        self._on_flushed = on_flushed
        self._flushing: set[Key] = set()
        self._ack_after_flush: dict[Key, list[tuple[int, FlushWaiter, int]]] = {}
        self._queues: dict[Hashable, CommitQueue[Key, PartitionLog]] = {}
        self._next_round: dict[Hashable, asyncio.Future[None]] = {}
        self._to_start: dict[Hashable, CommitQueue[Key, PartitionLog]] = {}
        """Log dirs whose next round is due to start (idle queues that got an append):
        :meth:`start_rounds` starts them at once, else a ``call_soon`` does."""
        self._fs_fds: dict[Path, int] = {}
        """Per log dir, a descriptor for syncfs, opened at its first commit round."""
        self._closed = False
        self._threads: dict[Path, SyncThread] = {}
        """Per log dir, the thread its commit rounds run on."""
        self._appended = asyncio.Event()
        """Set by every append: wakes :meth:`run` when it sleeps with nothing unflushed."""

    # -- asking for flushes ------------------------------------------------------------

    def appended(self, key: Key, plog: PartitionLog) -> None:
        """Bytes were appended to ``key``: commit them (group commit) or flush when the
        paper's policy says it is due.

        A log visible on write (``visibility = "written"``) follows the paper's policy
        (``flush_messages``, ``flush_ms``) even with group commit: its consumers do not
        wait for the fsync, and an fsync per append would only take CPU from the loop
        and the clients (measured: 1,000 msgs/s end-to-end p99 2.4 -> 1.3 ms)."""
        self._appended.set()
        if self.group_commit and not plog.visible_on_write:
            self.commit(key, plog)
        elif plog.flush_due(now_ms()):
            self._flush_due(key, plog)

    def _flush_due(self, key: Key, plog: PartitionLog) -> None:
        """Flush ``key`` now that the paper's policy says so: by a commit round of its
        log dir (group commit) or by a flush of its own."""
        if self.group_commit:
            self.commit(key, plog)
        else:
            self.schedule(key, plog)

    def ack_after_flush(self, key: Key, plog: PartitionLog, waiter: FlushWaiter, index: int) -> None:
        """Settle ``waiter``'s part ``index`` once everything appended so far is fsynced."""
        self._ack_after_flush.setdefault(key, []).append((plog.end_offset, waiter, index))
        if self.group_commit:
            self.commit(key, plog)
        else:
            self.schedule(key, plog)

    async def flush(self, key: Key, plog: PartitionLog) -> None:
        """Make everything appended to ``key`` so far durable and visible, and return
        when it is (or the fsync failed, which is logged)."""
        if self.group_commit:
            group = self.commit(key, plog)
            await asyncio.shield(self._round_future(group))
        else:
            await self._flush_now(key, plog)

    # -- group commit ----------------------------------------------------------------

    def _group(self, key: Key) -> Hashable:
        """One commit queue per log dir (a partition not in the manager: its own)."""
        log_dir: Path | None = self.logs.log_dir_of(*key)
        return key if log_dir is None else log_dir

    def commit(self, key: Key, plog: PartitionLog) -> Hashable:
        """Cover ``key`` by the next commit round of its log dir, starting one soon if
        none runs: when the caller calls :meth:`start_rounds` (the produce handler does,
        once it appended every part of its request and before it answers), else once
        the callbacks ready now ran. Returns the group (log dir) it went to."""
        group = self._group(key)
        queue = self._queues.get(group)
        if queue is None:
            queue = self._queues[group] = CommitQueue()
        if queue.add(key, plog):
            self._to_start[group] = queue
            asyncio.get_running_loop().call_soon(self._start_due, group)
        return group

    def start_rounds(self, inline: bool = True, on_loop: bool = True) -> None:
        """Start now the rounds that appends since the last call made due.

        A produce request's round so starts before its answer is written and before the
        event loop turns again: a consumer waits for one fsync after the append, not
        also for the answer's write and a loop iteration (about 35 us on an idle broker,
        traced). Appends that come later wait for the next round, as always.
        ``inline`` False: rounds that would fsync on the loop stay due (the produce
        handler starts those after its answer is written, so its acknowledgement does
        not wait for the fsync). ``on_loop`` False: every round goes to its thread now
        (followers were woken: their fetches must not wait for an fsync on the loop)."""
        if self._to_start:
            due, self._to_start = self._to_start, {}
            for group, queue in due.items():
                if not inline and on_loop and self._inline_ok(group, queue):
                    self._to_start[group] = queue
                else:
                    self._start_round(group, queue, may_inline=on_loop)

    def _inline_ok(self, group: Hashable, queue: CommitQueue[Key, PartitionLog]) -> bool:
        """Whether ``group``'s next round may fsync on the loop (the log dir is idle and
        its fsyncs are quick: :func:`~broker.server.durability.group_commit.inline_round`)."""
        if not self.inline or self._closed:
            return False
        times = self._fsync_times.get(group)
        return times is not None and inline_round(
            times, asyncio.get_running_loop().time(), sum(plog.unflushed_files for plog in queue.pending())
        )

    def _start_due(self, group: Hashable) -> None:
        """The fallback of :meth:`start_rounds` for ``group``: start its round unless
        :meth:`start_rounds` did already."""
        queue = self._to_start.pop(group, None)
        if queue is not None:  # a follower's append, a flush: never on the loop
            self._start_round(group, queue)

    def _round_future(self, group: Hashable) -> asyncio.Future[None]:
        """Done when the round that takes what is queued now for ``group`` has ended."""
        future = self._next_round.get(group)
        if future is None:
            future = self._next_round[group] = asyncio.get_running_loop().create_future()
        return future

    # A log dir's rounds are a chain of callbacks, not a task: _start_round prepares a
    # round on the loop and hands its fsyncs to the log dir's thread, which calls
    # _round_ended back on the loop (one call_soon_threadsafe: the only thread hop),
    # which publishes and starts the next round if partitions were added meanwhile.
    # At one produce per round (a lightly loaded broker) this is the per-request cost
    # of group commit, so it avoids a task, a coroutine and chained futures per round.

    def _start_round(self, group: Hashable, queue: CommitQueue[Key, PartitionLog], may_inline: bool = False) -> None:
        """Take what is queued for ``group`` and start its fsyncs on its thread (or, if
        ``may_inline`` and :meth:`_inline_ok`, run them here and end the round)."""
        loop = asyncio.get_running_loop()
        inline = may_inline and self._inline_ok(group, queue)
        started = loop.time()
        cpu_started = time.thread_time()
        batch = queue.take()
        ended = self._next_round.pop(group, None)
        try:
            prepared = self._prepare_round(group, batch)
            if prepared is not None:
                round_ = _Round(self, loop, group, queue, prepared, ended, started, time.thread_time() - cpu_started)
                if inline and round_.fs_fd is None:
                    round_.run_inline()
                else:
                    self._runner(group).submit(round_.run_sync)
                return
        except RuntimeError as exc:  # the pool was shut down: the broker is stopping
            log.debug("group commit not run: %s", exc)
        except Exception:  # never leave the queue marked running for ever
            log.exception("group commit round failed")
        self._next_round_or_idle(group, queue, ended, started, time.thread_time() - cpu_started)

    def _runner(self, group: Hashable) -> SyncThread | Executor:
        """Where ``group``'s rounds run: a log dir's own thread (:mod:`.sync_thread`),
        the pool for a partition outside the manager's log dirs."""
        if not isinstance(group, Path) or self._closed:
            return self.fsync_pool  # closed: the broker shut the pool down too
        thread = self._threads.get(group)
        if thread is None:
            thread = self._threads[group] = SyncThread(f"group-commit {group}")
        return thread

    def _prepare_round(
        self, group: Hashable, batch: dict[Key, PartitionLog]
    ) -> tuple[list[tuple[Key, PartitionLog, PendingFlush]], int | None] | None:
        """Capture each partition's flush: many files go to one syncfs of the log dir's
        file system (once its descriptor exists: from the dir's second round on), few to
        an fsync each. None: nothing to sync."""
        fs_fd = self._fs_fds.get(group) if isinstance(group, Path) else None
        if fs_fd is not None and (sum(p.unflushed_files for p in batch.values()) < SYNCFS_MIN_FILES):
            fs_fd = None
        elif isinstance(group, Path) and group not in self._fs_fds and SYNCFS is not None:
            try:  # before this round's fsyncs: later writeback errors reach syncfs
                self._fs_fds[group] = open_fs_fd(group)
            except OSError as exc:
                log.warning("cannot open log dir %s for syncfs (%s); fsyncing each file", group, exc)
        prepared: list[tuple[Key, PartitionLog, PendingFlush]] = []
        for key, plog in batch.items():
            try:
                prepared.append((key, plog, plog.prepare_flush(whole_fs=fs_fd is not None)))
            except LogferryError as exc:
                log.error("cannot flush %s-%d: %s", key[0], key[1], exc)
                self._fail_acks(key, exc)
        return (prepared, fs_fd) if prepared else None

    def _round_ended(self, round_: _Round, outcomes: list[OSError | None] | BaseException) -> None:
        """Back on the loop after a round's fsyncs: publish, then the next round."""
        cpu_started = time.thread_time()
        times = self._fsync_times.get(round_.group)
        if times is None:
            times = self._fsync_times[round_.group] = FsyncTimes()
        times.ended(round_.sync_s, round_.loop.time())
        try:
            if isinstance(outcomes, BaseException):
                log.error("group commit round failed", exc_info=outcomes)
                outcomes = [OSError(f"the fsync round failed: {outcomes!r}") for _ in round_.prepared]
            for (key, plog, pending), error in zip(round_.prepared, outcomes, strict=True):
                if error is None:
                    self._published(key, plog, pending.end)
                else:
                    log.error("fsync of %s-%d failed: %s", key[0], key[1], error)
                    self._fail_acks(key, StorageError(f"fsync of partition {key[0]}-{key[1]} failed: {error}"))
        except Exception:  # never leave the queue marked running for ever
            log.exception("group commit round failed")
        self._next_round_or_idle(
            round_.group, round_.queue, round_.ended, round_.started, round_.cpu + time.thread_time() - cpu_started
        )

    def _next_round_or_idle(
        self,
        group: Hashable,
        queue: CommitQueue[Key, PartitionLog],
        ended: asyncio.Future[None] | None,
        started: float,
        cpu: float,
    ) -> None:
        """A round ended: settle its waiters; start the next one if partitions were
        added meanwhile, after the pause :func:`~broker.server.durability.group_commit.next_round_pause`
        says (at most one round per 0.5 ms, and at most a tenth of the event loop's
        time in rounds). The pause is a loop timer, which wakes on the millisecond
        (epoll) unless a socket wakes the loop first: so it is taken only when needed."""
        if ended is not None and not ended.done():
            ended.set_result(None)
        if not queue.round_done():
            return
        loop = asyncio.get_running_loop()
        pause = next_round_pause(started, loop.time(), cpu)
        if pause:
            loop.call_later(pause, self._start_round, group, queue)
        else:
            self._start_round(group, queue)

    def close(self) -> None:
        """Stop the log dirs' commit threads (after the rounds they run) and close their
        syncfs descriptors (the broker is stopping)."""
        self._closed = True
        threads, self._threads = list(self._threads.values()), {}
        for thread in threads:
            thread.close()
        fds, self._fs_fds = list(self._fs_fds.values()), {}
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the paper's policy ------------------------------------------------------------

    def schedule(self, key: Key, plog: PartitionLog) -> None:
        """Flush ``key`` soon, unless a flush of it is already running."""
        if key in self._flushing:
            return
        self._flushing.add(key)
        self._background.start(self._flush_now(key, plog), "flush")

    async def _flush_now(self, key: Key, plog: PartitionLog) -> None:
        """fsync in a worker thread, then advance the visible end and wake fetchers."""
        self._flushing.add(key)
        try:
            while True:
                pending = plog.prepare_flush()
                (error,) = await asyncio.get_running_loop().run_in_executor(
                    self.fsync_pool, self._sync, [pending], None
                )
                if error is not None:
                    log.error("fsync of %s-%d failed: %s", key[0], key[1], error)
                    return
                self._published(key, plog, pending.end)
                # flush.messages=1 acks that arrived during this fsync need one more pass
                if not any(item[0] > plog.flushed_end for item in self._ack_after_flush.get(key, ())):
                    break
        finally:
            self._flushing.discard(key)

    async def run(self) -> None:
        """Flush every partition whose flush is due, for ever (a background task; with
        group commit a backstop only: appends start their commits themselves).

        While some partition holds unflushed bytes it looks every quarter of
        ``flush_ms``; while none does it sleeps until :meth:`appended` wakes it (or
        :data:`IDLE_SCAN_S` passed). An idle broker with ``flush_ms = 20`` so wakes once
        a second, not 200 times (3.5% of a core, measured, for nothing)."""
        tick = min(max(self.flush_ms / 4000, 0.005), 0.1)
        while True:
            self._appended.clear()
            now = now_ms()
            unflushed = False
            for key, plog in self.logs.logs():
                if plog.unflushed_bytes:
                    unflushed = True
                    if key not in self._flushing and plog.flush_due(now):
                        self._flush_due(key, plog)
            if unflushed:
                await asyncio.sleep(tick)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._appended.wait(), IDLE_SCAN_S)

    # -- after an fsync ----------------------------------------------------------------

    def _published(self, key: Key, plog: PartitionLog, end: int) -> None:
        """An fsync covering bytes below ``end`` returned: make them visible."""
        plog.mark_flushed(end)
        self._flushed_to(key, plog.flushed_end)
        self._on_flushed(key)

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

    def _fail_acks(self, key: Key, error: LogferryError) -> None:
        """The flush of ``key`` failed: produces held for it answer with ``error``."""
        for _, waiter, index in self._ack_after_flush.pop(key, ()):
            waiter.part_done(index, error)


class _Round:
    """One group-commit round between :meth:`Flusher._start_round` and
    :meth:`Flusher._round_ended`."""

    __slots__ = ("flusher", "loop", "group", "queue", "prepared", "fs_fd", "ended", "started", "cpu", "sync_s")

    def __init__(
        self,
        flusher: Flusher,
        loop: asyncio.AbstractEventLoop,
        group: Hashable,
        queue: CommitQueue[Key, PartitionLog],
        prepared: tuple[list[tuple[Key, PartitionLog, PendingFlush]], int | None],
        ended: asyncio.Future[None] | None,
        started: float,
        cpu: float,
    ):
        self.flusher = flusher
        self.loop = loop
        self.group = group
        self.queue = queue
        self.prepared, self.fs_fd = prepared
        self.ended = ended
        self.started = started
        """``loop.time()`` when the round was taken."""
        self.cpu = cpu
        """CPU seconds the round took on the event loop's thread so far."""
        self.sync_s = 0.0
        """Seconds its fsyncs took."""

    def _sync(self) -> list[OSError | None] | BaseException:
        began = time.monotonic()
        try:
            return self.flusher._sync([p for _, _, p in self.prepared], self.fs_fd)
        except BaseException as exc:  # handed to _round_ended, which logs it
            return exc
        finally:
            self.sync_s = time.monotonic() - began

    def run_inline(self) -> None:
        """On the event loop: the round's fsyncs, then its end, at once."""
        self.flusher._round_ended(self, self._sync())

    def run_sync(self) -> None:
        """On the log dir's thread: the round's fsyncs, then the loop is told."""
        outcomes = self._sync()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the broker stopped meanwhile
            self.loop.call_soon_threadsafe(self.flusher._round_ended, self, outcomes)


async def run_retention(logs: LogManager, interval_ms: int, segments_deleted: PartitionCounter) -> None:
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
