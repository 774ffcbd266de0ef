"""The per-log-dir thread that runs group-commit rounds (broker.server.durability.sync_thread)."""

from __future__ import annotations

import threading

import pytest

from broker.server.durability.sync_thread import SyncThread


def test_calls_run_in_order_on_one_thread_and_a_failing_one_does_not_stop_it() -> None:
    runner = SyncThread("test-sync")
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def call(n: int):
        def run() -> None:
            seen.append((n, threading.current_thread().name))

        return run

    def boom() -> None:
        raise ValueError("a bug in a round")

    runner.submit(call(1))
    runner.submit(boom)
    runner.submit(call(2))
    runner.submit(done.set)
    assert done.wait(10)
    assert seen == [(1, "test-sync"), (2, "test-sync")]
    runner.close()


def test_close_runs_what_was_submitted_then_refuses_more() -> None:
    runner = SyncThread("test-sync")
    seen: list[int] = []
    runner.submit(lambda: seen.append(1))
    runner.close()
    assert seen == [1]
    with pytest.raises(RuntimeError):
        runner.submit(lambda: seen.append(2))
    runner.close()  # twice is harmless


def test_a_thread_is_started_only_when_there_is_work() -> None:
    before = threading.active_count()
    runner = SyncThread("test-sync")
    assert threading.active_count() == before
    runner.close()
