"""Group commit: the sans-IO queue, and the flusher that drives it with a fake fsync
that blocks, to show that consumers never see bytes before their fsync returned."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker.server.durability.flusher import Flusher
from broker.server.durability.group_commit import (
    INLINE_IDLE_FACTOR,
    INLINE_MAX_FSYNC_S,
    LOOP_SHARE,
    MIN_PAUSE_S,
    MIN_ROUND_PERIOD_S,
    CommitQueue,
    FsyncTimes,
    inline_round,
    next_round_pause,
)
from broker.storage.config import LogConfig
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PendingFlush
from broker.storage.sync import SYNCFS, SYNCFS_MIN_FILES, open_fs_fd, sync_round
from broker.wire import records

# -- CommitQueue (no I/O) ---------------------------------------------------------------


def test_the_first_add_starts_a_round_and_later_adds_wait_for_the_next() -> None:
    queue: CommitQueue[str, int] = CommitQueue()
    assert queue.add("a", 1) is True  # idle: the caller starts a round
    assert queue.add("b", 2) is False  # a round is starting: no second one
    assert queue.take() == {"a": 1, "b": 2}
    assert queue.add("a", 1) is False and queue.add("c", 3) is False  # during the round
    assert queue.add("a", 1) is False  # the same partition again: covered once
    assert len(queue) == 2 and "a" in queue
    assert queue.round_done() is True  # more came meanwhile: next round at once
    assert queue.take() == {"a": 1, "c": 3}
    assert queue.round_done() is False and not queue.running  # idle again
    assert queue.add("d", 4) is True
    assert queue.rounds == 2


def test_a_round_with_nothing_added_meanwhile_leaves_the_queue_idle() -> None:
    queue: CommitQueue[str, int] = CommitQueue()
    assert queue.add("a", 1)
    queue.take()
    assert not queue.round_done()
    assert queue.take() == {} and not queue.round_done()


# -- the flusher with a blocking fsync --------------------------------------------------


class BlockingSync:
    """Runs the real fsyncs, but only once the test lets the round go."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # flushes per round
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)

    def __call__(self, pendings: Sequence[PendingFlush], fs_fd: int | None = None) -> list[OSError | None]:
        self.calls.append(len(pendings))
        self.entered.release()
        assert self.release.acquire(timeout=10), "the test never released the fsync"
        return sync_round(pendings, fs_fd)


async def _until(predicate, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _read_visible(plog, offset: int) -> bytes:
    """What a consumer's fetch from ``offset`` would get: bytes below the visible end."""
    out = bytearray()
    while offset < plog.visible_end:
        piece = plog.read_slice(offset, 1 << 20)
        out += os.pread(piece.file.fileno(), piece.count, piece.position)
        offset += piece.count
    assert plog.read_slice(offset, 1 << 20).count == 0  # nothing past the visible end
    return bytes(out)


async def _consumers_see_only_fsynced_bytes(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.load()
    plog = logs.create("t", 0)
    other = logs.create("t", 1)
    sync = BlockingSync()
    woken: list[tuple[str, int]] = []
    flushed: list[tuple[str, int]] = []
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, woken.append, flushed.append, sync=sync)
    assert flusher.group_commit  # the default
    loop = asyncio.get_running_loop()

    first = records.encode_batch([b"one"], None, 1)
    plog.append(first, 1)
    flusher.appended(("t", 0), plog)
    await loop.run_in_executor(None, sync.entered.acquire)  # round 1 is in its fsync
    second = records.encode_batch([b"two"], None, 1)
    third = records.encode_batch([b"three"], None, 1)
    plog.append(second, 1)
    flusher.appended(("t", 0), plog)
    plog.append(third, 1)
    flusher.appended(("t", 0), plog)
    other.append(first, 1)
    flusher.appended(("t", 1), other)
    # Appended, but no fsync has returned: a consumer sees nothing, nobody is woken.
    assert plog.end_offset == len(first + second + third)
    assert plog.visible_end == 0 and _read_visible(plog, 0) == b""
    assert woken == [] and flushed == []

    sync.release.release()  # round 1 returns: only what it covered becomes visible
    await _until(lambda: woken, "the consumers' wake-up after round 1")
    assert plog.visible_end == len(first) and _read_visible(plog, 0) == first
    assert other.visible_end == 0
    await loop.run_in_executor(None, sync.entered.acquire)  # round 2 started by itself
    assert plog.visible_end == len(first)  # its bytes are still not visible
    sync.release.release()
    await _until(lambda: plog.visible_end == plog.end_offset, "round 2")
    await _until(lambda: other.visible_end == other.end_offset, "round 2 (partition 1)")
    assert _read_visible(plog, 0) == first + second + third
    assert _read_visible(other, 0) == first
    # Four appends, two rounds: the second covered three appends of two partitions.
    assert sync.calls == [1, 2]
    assert woken == [("t", 0), ("t", 0), ("t", 1)] == flushed
    pool.shutdown()
    logs.close()


def test_consumers_see_only_fsynced_bytes_and_one_round_covers_what_came_meanwhile(tmp_path: Path) -> None:
    asyncio.run(_consumers_see_only_fsynced_bytes(tmp_path))


class Waiter:
    def __init__(self) -> None:
        self.done: list[tuple[int | None, object]] = []

    def part_done(self, index, error=None) -> None:
        self.done.append((index, error))


async def _flush_and_acks(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(flush_messages=1))
    logs.load()
    plog = logs.create("t", 0)
    sync = BlockingSync()
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, lambda key: None, lambda key: None, sync=sync)
    loop = asyncio.get_running_loop()
    plog.append(records.encode_batch([b"a"], None, 1), 1)
    waiter = Waiter()
    flusher.ack_after_flush(("t", 0), plog, waiter, 0)
    await loop.run_in_executor(None, sync.entered.acquire)
    plog.append(records.encode_batch([b"b"], None, 1), 1)
    late = Waiter()
    flusher.ack_after_flush(("t", 0), plog, late, 3)
    flushing = asyncio.ensure_future(flusher.flush(("t", 0), plog))
    await asyncio.sleep(0.02)
    assert waiter.done == [] and late.done == [] and not flushing.done()
    sync.release.release()
    await _until(lambda: waiter.done, "the first ack")
    assert waiter.done == [(0, None)] and late.done == []  # its bytes are in round 2
    await loop.run_in_executor(None, sync.entered.acquire)
    assert not flushing.done()
    sync.release.release()
    await asyncio.wait_for(flushing, 5)
    assert late.done == [(3, None)] and plog.visible_end == plog.end_offset
    pool.shutdown()
    logs.close()


def test_held_acks_and_flush_wait_for_the_round_that_covers_their_bytes(tmp_path: Path) -> None:
    asyncio.run(_flush_and_acks(tmp_path))


async def _failed_fsync(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(flush_messages=1))
    logs.load()
    plog = logs.create("t", 0)

    def failing(pendings: Sequence[PendingFlush], fs_fd: int | None) -> list[OSError | None]:
        return [OSError(5, "Input/output error") for _ in pendings]

    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, lambda key: None, lambda key: None, sync=failing)
    plog.append(records.encode_batch([b"a"], None, 1), 1)
    waiter = Waiter()
    flusher.ack_after_flush(("t", 0), plog, waiter, 0)
    await _until(lambda: waiter.done, "the failed ack")
    ((index, error),) = waiter.done
    assert index == 0 and "fsync" in str(error)
    assert plog.visible_end == 0  # never visible
    plog.append(records.encode_batch([b"b"], None, 1), 1)  # the queue is not stuck
    await asyncio.wait_for(flusher.flush(("t", 0), plog), 5)
    pool.shutdown()
    logs.close()


def test_a_failed_fsync_fails_the_held_acks_and_shows_nothing(tmp_path: Path) -> None:
    asyncio.run(_failed_fsync(tmp_path))


async def _interval_policy(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(group_commit=False, flush_ms=60_000))
    logs.load()
    plog = logs.create("t", 0)
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 60_000, pool, lambda key: None, lambda key: None)
    plog.append(records.encode_batch([b"a"], None, 1), 1)
    flusher.appended(("t", 0), plog)
    await asyncio.sleep(0.05)
    assert plog.visible_end == 0  # the paper's timer: not due yet
    await flusher.flush(("t", 0), plog)
    assert plog.visible_end == plog.end_offset
    pool.shutdown()
    logs.close()


def test_without_group_commit_the_paper_timer_decides(tmp_path: Path) -> None:
    asyncio.run(_interval_policy(tmp_path))


async def _written_visibility_fsyncs_by_the_paper_policy(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(visibility="written", flush_messages=3, flush_ms=600_000))
    logs.load()
    plog = logs.create("t", 0)
    sync = BlockingSync()
    woken: list[tuple[str, int]] = []
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 600_000, pool, woken.append, lambda key: None, sync=sync)
    assert flusher.group_commit
    batch = records.encode_batch([b"w"], None, 1)
    for _ in range(2):  # under flush_messages: visible at once, no round started
        plog.append(batch, 1)
        flusher.appended(("t", 0), plog)
    flusher.start_rounds()
    await asyncio.sleep(0.05)
    assert sync.calls == [] and plog.flushed_end == 0
    assert plog.visible_end == plog.end_offset == 2 * len(batch)
    plog.append(batch, 1)  # the third: due by flush_messages, one group-commit round
    flusher.appended(("t", 0), plog)
    await asyncio.get_running_loop().run_in_executor(None, sync.entered.acquire)
    sync.release.release()
    await _until(lambda: plog.flushed_end == plog.end_offset, "the round")
    assert sync.calls == [1]
    pool.shutdown()
    logs.close()


def test_a_log_visible_on_write_fsyncs_by_the_paper_policy_under_group_commit(tmp_path: Path) -> None:
    asyncio.run(_written_visibility_fsyncs_by_the_paper_policy(tmp_path))


class CountingLogs:
    """A LogManager seen through ``logs()``: counts how often the flusher's loop looks."""

    def __init__(self, logs: LogManager):
        self.inner, self.config, self.looks = logs, logs.config, 0

    def logs(self):
        self.looks += 1
        return self.inner.logs()

    def log_dir_of(self, topic: str, partition: int):
        return self.inner.log_dir_of(topic, partition)


async def _idle_loop(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(group_commit=False, flush_ms=20))
    logs.load()
    plog = logs.create("t", 0)
    counting = CountingLogs(logs)
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(counting, 20, pool, lambda key: None, lambda key: None)  # type: ignore[arg-type]
    task = asyncio.create_task(flusher.run())
    await asyncio.sleep(0.5)
    idle_looks = counting.looks
    assert idle_looks <= 2, f"an idle flusher looked {idle_looks} times in 0.5 s"
    plog.append(records.encode_batch([b"a"], None, 1), 1)
    flusher.appended(("t", 0), plog)
    await _until(lambda: plog.visible_end == plog.end_offset, "the timer's flush after the append")
    busy_looks = counting.looks - idle_looks
    assert busy_looks >= 2, "the append woke the loop, which looked every tick until the flush was due"
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    pool.shutdown()
    logs.close()


def test_an_idle_flusher_sleeps_until_an_append_wakes_it(tmp_path: Path) -> None:
    """With nothing unflushed the timer loop does not tick every flush_ms / 4 (200 times
    a second at 20 ms); the first append wakes it and the flush comes on time."""
    asyncio.run(_idle_loop(tmp_path))


# -- one syncfs for a round of many files ------------------------------------------------


def _many_logs(tmp_path: Path, n: int) -> tuple[LogManager, list]:
    logs = LogManager([tmp_path], LogConfig())
    logs.load()
    plogs = [logs.create("t", p) for p in range(n)]
    for plog in plogs:
        plog.append(records.encode_batch([b"m"], None, 1), 1)
    return logs, plogs


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_round_of_many_files_is_one_syncfs_and_few_files_fsync_each(tmp_path: Path) -> None:
    calls: list[int] = []

    def fake_syncfs(fd: int) -> int:
        os.fstat(fd)  # a live descriptor of the log's file system
        calls.append(fd)
        return 0

    logs, plogs = _many_logs(tmp_path, 10)
    fs_fd = open_fs_fd(tmp_path)
    assert sum(plog.unflushed_files for plog in plogs) >= SYNCFS_MIN_FILES
    before = _open_fds()
    pendings = [plog.prepare_flush(whole_fs=True) for plog in plogs]
    assert _open_fds() == before  # no descriptor captured: one syncfs covers them
    assert sync_round(pendings, fs_fd, fake_syncfs) == [None] * 10
    assert calls == [fs_fd] and plogs[0].unflushed_files == 0
    plogs[0].append(records.encode_batch([b"n"], None, 1), 1)
    few = [plogs[0].prepare_flush()]
    assert _open_fds() == before + 1  # a duplicate of the segment's descriptor
    assert sync_round(few, None, fake_syncfs) == [None] and calls == [fs_fd]  # an fsync
    assert _open_fds() == before  # closed after its fsync
    os.close(fs_fd)
    logs.close()


def test_a_failed_syncfs_fails_every_log_of_the_round(tmp_path: Path) -> None:
    logs, plogs = _many_logs(tmp_path, 10)
    pendings = [plog.prepare_flush(whole_fs=True) for plog in plogs]

    def failing(fd: int) -> int:
        ctypes.set_errno(5)
        return -1

    outcomes = sync_round(pendings, 0, failing)
    assert all(isinstance(e, OSError) and e.errno == 5 for e in outcomes)
    assert all(plog.needs_recovery for plog in plogs)  # no more writes: restart recovers
    for plog in plogs:
        plog._segments[-1].close()


@pytest.mark.skipif(SYNCFS is None, reason="syncfs needs Linux >= 5.8")
def test_the_real_syncfs_makes_a_round_durable(tmp_path: Path) -> None:
    logs, plogs = _many_logs(tmp_path, 10)
    fs_fd = open_fs_fd(tmp_path)
    pendings = [plog.prepare_flush(whole_fs=True) for plog in plogs]
    assert sync_round(pendings, fs_fd) == [None] * 10
    os.close(fs_fd)
    for plog, pending in zip(plogs, pendings, strict=True):
        plog.mark_flushed(pending.end)
        assert plog.visible_end == plog.end_offset
    logs.close()


async def _many_partitions_commit(tmp_path: Path) -> None:
    logs, plogs = _many_logs(tmp_path, 10)
    seen: list[int | None] = []

    def recording(pendings: Sequence[PendingFlush], fs_fd: int | None) -> list[OSError | None]:
        seen.append(fs_fd)
        return sync_round(pendings, fs_fd)

    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, lambda key: None, lambda key: None, sync=recording)
    for round_no in range(2):
        for p, plog in enumerate(plogs):
            plog.append(records.encode_batch([b"r%d" % round_no], None, 1), 1)
            flusher.appended(("t", p), plog)
        await flusher.flush(("t", 0), plogs[0])
        assert all(plog.visible_end == plog.end_offset for plog in plogs)
    # The log dir's first round fsyncs each file and opens its descriptor; the next
    # round of many files is one syncfs on it (where the kernel has a usable syncfs).
    assert seen[0] is None
    assert (seen[1] is not None) == (SYNCFS is not None)
    flusher.close()
    pool.shutdown()
    logs.close()


def test_rounds_of_many_partitions_sync_the_log_dir_at_once(tmp_path: Path) -> None:
    asyncio.run(_many_partitions_commit(tmp_path))


# -- where rounds run --------------------------------------------------------------------


async def _rounds_on_the_log_dirs_thread(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.load()
    plog = logs.create("t", 0)
    threads: list[str] = []

    def recording(pendings: Sequence[PendingFlush], fs_fd: int | None) -> list[OSError | None]:
        threads.append(threading.current_thread().name)
        return sync_round(pendings, fs_fd)

    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, lambda key: None, lambda key: None, sync=recording)
    for n in range(3):
        plog.append(records.encode_batch([b"m%d" % n], None, 1), 1)
        flusher.appended(("t", 0), plog)
        await flusher.flush(("t", 0), plog)
        assert plog.visible_end == plog.end_offset
    # every round of the log dir ran on its own thread (not the shared pool), one at a time
    assert threads and set(threads) == {f"group-commit {tmp_path}"}
    flusher.close()
    assert not any(t.name == f"group-commit {tmp_path}" for t in threading.enumerate())
    # after close (the broker stops), a late append is still flushed by the pool
    plog.append(records.encode_batch([b"late"], None, 1), 1)
    await flusher.flush(("t", 0), plog)
    assert plog.visible_end == plog.end_offset and threads[-1] != f"group-commit {tmp_path}"
    pool.shutdown()
    logs.close()


def test_a_log_dirs_rounds_run_on_its_own_thread_until_close(tmp_path: Path) -> None:
    asyncio.run(_rounds_on_the_log_dirs_thread(tmp_path))


# -- next_round_pause (no I/O) ------------------------------------------------------------


def test_a_cheap_round_that_outlasted_the_period_is_followed_at_once() -> None:
    # one partition: 25 us of loop CPU, its fsync kept it 0.45 ms: the old pause of 9x
    # the CPU after the end (0.225 ms, a loop timer) is gone
    assert next_round_pause(started=10.0, now=10.00045, cpu=0.000025) == 0.0
    assert next_round_pause(started=10.0, now=10.002, cpu=0.000045) == 0.0


def test_a_fast_round_waits_for_the_rest_of_the_period() -> None:
    pause = next_round_pause(started=10.0, now=10.0001, cpu=0.00002)
    assert pause == pytest.approx(MIN_ROUND_PERIOD_S - 0.0001)
    # less than MIN_PAUSE_S left: start now
    assert next_round_pause(started=10.0, now=10.0004, cpu=0.00002) == 0.0


def test_an_expensive_round_keeps_the_loop_share_bound() -> None:
    # 100 partitions: 1 ms of loop CPU; rounds take at most a tenth of the loop
    cpu = 0.001
    assert next_round_pause(started=10.0, now=10.002, cpu=cpu) == pytest.approx(cpu * (LOOP_SHARE - 1))
    assert next_round_pause(started=10.0, now=10.0011, cpu=cpu) == pytest.approx(cpu * (LOOP_SHARE - 1))
    # several partitions (60 us): paused after the end as before, more per round
    assert next_round_pause(started=10.0, now=10.002, cpu=0.00006) == pytest.approx(0.00054)
    assert MIN_PAUSE_S > 0


async def _start_rounds_starts_the_fsync_before_the_loop_turns(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.load()
    plogs = [logs.create("t", 0), logs.create("t", 1)]
    sync = BlockingSync()
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, lambda key: None, lambda key: None, sync=sync)
    batch = records.encode_batch([b"one"], None, 1)
    for i, plog in enumerate(plogs):  # one request's two parts: one round covers both
        plog.append(batch, 1)
        flusher.appended(("t", i), plog)
    flusher.start_rounds()  # no await: the round is handed to its thread right now
    assert sync.entered.acquire(timeout=10), "start_rounds did not start the round"
    assert sync.calls == [2]
    flusher.start_rounds()  # nothing due: starts nothing more
    await asyncio.sleep(0)  # the call_soon fallback finds the round started already
    assert sync.calls == [2]
    sync.release.release()
    await _until(lambda: all(p.visible_end == p.end_offset for p in plogs), "the round")
    assert sync.calls == [2]
    # Without start_rounds the next loop turn starts the round (the fallback).
    plogs[0].append(batch, 1)
    flusher.appended(("t", 0), plogs[0])
    assert sync.calls == [2]
    await loop_turn()
    assert sync.entered.acquire(timeout=10)
    sync.release.release()
    await _until(lambda: plogs[0].visible_end == plogs[0].end_offset, "the fallback round")
    assert sync.calls == [2, 1]
    flusher.close()
    pool.shutdown()
    logs.close()


async def loop_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_start_rounds_starts_the_due_round_at_once_and_the_fallback_does_not_repeat_it(tmp_path: Path) -> None:
    asyncio.run(_start_rounds_starts_the_fsync_before_the_loop_turns(tmp_path))


# -- rounds on the event loop (an idle log dir) ----------------------------------------


def test_only_a_one_file_round_of_an_idle_quick_log_dir_fsyncs_on_the_loop() -> None:
    times = FsyncTimes()
    assert not inline_round(times, 10.0, 1)  # no fsync measured yet
    times.ended(0.0002, 10.0)
    idle = 10.0 + INLINE_IDLE_FACTOR * 0.0002
    assert inline_round(times, idle, 1)
    assert not inline_round(times, idle - 0.0001, 1)  # appended soon after the last round
    assert not inline_round(times, idle, 2)  # two files (a roll, two partitions)
    for _ in range(50):  # the disk became slow: the moving average follows
        times.ended(INLINE_MAX_FSYNC_S * 3, 20.0)
    assert not inline_round(times, 30.0, 1)


async def _an_idle_log_dirs_round_runs_on_the_loop(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.load()
    plog = logs.create("t", 0)
    woken: list = []
    pool = ThreadPoolExecutor(1)
    flusher = Flusher(logs, 200, pool, woken.append, lambda key: None)
    assert flusher.inline  # the default sync: allowed
    batch = records.encode_batch([b"one"], None, 1)
    plog.append(batch, 1)
    flusher.appended(("t", 0), plog)
    flusher.start_rounds()  # no fsync measured yet: the log dir's thread
    assert plog.visible_end == 0
    await _until(lambda: plog.visible_end == plog.end_offset, "the first round")
    # However slow this machine's disk is now: quick fsyncs, idle since a second ago.
    times = flusher._fsync_times[flusher._group(("t", 0))]
    times.fsync_s = INLINE_MAX_FSYNC_S / 10
    times.last_end = asyncio.get_running_loop().time() - 1.0
    plog.append(batch, 1)
    flusher.appended(("t", 0), plog)
    flusher.start_rounds(inline=False)  # the produce handler, before its answer
    assert plog.visible_end < plog.end_offset and woken == [("t", 0)]
    flusher.start_rounds()  # after its answer: fsynced here, published, consumers woken
    assert plog.visible_end == plog.end_offset and woken == [("t", 0)] * 2
    # Idle again, but followers were woken (on_loop False), or the round is a
    # follower's append or a flush (the call_soon fallback): the thread, not the loop.
    times.last_end = asyncio.get_running_loop().time() - 1.0
    plog.append(batch, 1)
    flusher.appended(("t", 0), plog)
    flusher.start_rounds(on_loop=False)
    assert plog.visible_end < plog.end_offset  # published later, by the thread's round
    await _until(lambda: plog.visible_end == plog.end_offset, "the on_loop=False round")
    times.last_end = asyncio.get_running_loop().time() - 1.0
    plog.append(batch, 1)
    flusher.appended(("t", 0), plog)
    await asyncio.sleep(0)  # the fallback ran (in this loop turn: nothing published yet)
    assert plog.visible_end < plog.end_offset
    await _until(lambda: plog.visible_end == plog.end_offset, "the fallback's round")
    # Appended soon after a round (busy), so the thread again: not visible yet here.
    times.last_end = asyncio.get_running_loop().time() + 1.0  # never idle long enough
    plog.append(batch, 1)
    flusher.appended(("t", 0), plog)
    flusher.start_rounds()
    assert plog.visible_end < plog.end_offset
    await _until(lambda: plog.visible_end == plog.end_offset, "the thread's round")
    flusher.close()
    pool.shutdown()
    logs.close()


def test_an_idle_log_dirs_round_fsyncs_on_the_loop_and_a_busy_ones_on_its_thread(tmp_path: Path) -> None:
    asyncio.run(_an_idle_log_dirs_round_runs_on_the_loop(tmp_path))


def test_a_tests_own_sync_never_runs_on_the_loop(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig())
    flusher = Flusher(logs, 200, ThreadPoolExecutor(1), lambda key: None, lambda key: None, sync=BlockingSync())
    assert not flusher.inline
