"""Background tasks fail loudly (broker/common/background.py), without a broker: a
crash is logged once with its traceback and reported to the owner; a cancel at
shutdown and a normal return are not errors; the tasks are referenced while they run."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.common.background import BackgroundTasks


async def _crash() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("disk on fire")


async def _forever() -> None:
    await asyncio.Event().wait()


def test_a_crash_is_logged_once_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    crashes: list[tuple[str, BaseException]] = []

    async def scenario() -> None:
        tasks = BackgroundTasks(lambda name, exc: crashes.append((name, exc)), "broker 7")
        task = tasks.start(_crash(), "flusher")
        assert task in tasks.tasks  # referenced while it runs
        await asyncio.wait([task])
        await asyncio.sleep(0)  # done-callbacks run on the next loop turn
        assert not tasks.tasks
        assert [name for name, _ in tasks.crashed] == ["flusher"]

    with caplog.at_level(logging.ERROR, logger="logferry.broker"):
        asyncio.run(scenario())
    assert [(name, str(exc)) for name, exc in crashes] == [("flusher", "disk on fire")]
    (record,) = caplog.records
    message = record.getMessage()
    assert "'flusher' crashed: RuntimeError: disk on fire" in message
    assert "broker 7 stops (exit code 1)" in message and "\n" not in message
    assert record.exc_info is not None and record.exc_info[1] is crashes[0][1]


def test_cancelled_and_finished_tasks_are_not_errors(caplog: pytest.LogCaptureFixture) -> None:
    crashes: list[str] = []

    async def scenario() -> None:
        tasks = BackgroundTasks(lambda name, exc: crashes.append(name))
        done = tasks.start(asyncio.sleep(0), "short")
        long = tasks.start(_forever(), "long")
        await asyncio.wait([done])
        await tasks.cancel()
        assert long.cancelled() and not tasks.tasks

    with caplog.at_level(logging.DEBUG, logger="logferry.broker"):
        asyncio.run(scenario())
    assert crashes == [] and not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_without_an_owner_a_crash_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks()
        await asyncio.wait([tasks.start(_crash(), "flush")])
        await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR, logger="logferry.broker"):
        asyncio.run(scenario())
    (record,) = caplog.records
    assert "crashed: RuntimeError" in record.getMessage()
    assert "exit code" not in record.getMessage()
