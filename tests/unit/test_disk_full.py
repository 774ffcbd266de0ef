"""A full log dir, without filling a disk: the errno -> error mapping, the rate-limited
report, the produce answer, and the producer's refusal to retry. (The same path on a
real full file system: tests/integration/test_broker_start_and_disk.py.)"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path

import pytest

from broker.client.sender import RetryPolicy
from broker.common.errors import DiskFullError, StorageError, error_for_code
from broker.common.metrics import Metrics
from broker.common.ratelimit import RateLimitedLog
from broker.server.durability.disk_full import DiskFullReporter
from broker.server.services.responder import Responder
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog, write_error
from broker.wire import protocol, records
from broker.wire.produce import parse_produce_answer
from tests.unit.test_server_handlers import Channel, _request, _services


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_no_space_is_a_disk_full_error_naming_the_log_dir(code):
    error = write_error(OSError(code, os.strerror(code)), "cannot append 10 bytes to t-0", Path("/data/a"))
    assert isinstance(error, DiskFullError) and isinstance(error, StorageError)
    assert error.log_dir == "/data/a" and error.code == 21 and not error.retriable
    assert str(error) == f"log dir /data/a is full: cannot append 10 bytes to t-0: {os.strerror(code)}"


def test_other_write_failures_stay_retriable_storage_errors():
    error = write_error(OSError(errno.EIO, "Input/output error"), "cannot append", Path("/d"))
    assert type(error) is StorageError and error.retriable and error.code == 13


def test_a_disk_full_answer_fails_the_batch_at_once_in_the_producer():
    error = error_for_code(21, "disk full on broker 3 (log dir /data/a): cannot append")
    assert isinstance(error, DiskFullError)
    assert str(error) == "disk full on broker 3 (log dir /data/a): cannot append"
    policy = RetryPolicy(retries=None, backoff=0.1, delivery_timeout=120.0)
    assert not policy.should_retry(error, attempts=1, age=0.0, closing=False)


def test_rate_limiter_lets_one_event_per_key_and_interval_through():
    now = [100.0]
    limiter = RateLimitedLog(logging.getLogger("test"), 60.0, clock=lambda: now[0])
    assert limiter.allow("a") == 0
    assert limiter.allow("a") is None and limiter.allow("a") is None
    assert limiter.allow("b") == 0  # keys are independent
    now[0] += 59.9
    assert limiter.allow("a") is None
    now[0] += 0.1
    assert limiter.allow("a") == 3  # three muted since the last report
    assert limiter.allow("a") is None


def test_reporter_counts_every_refusal_and_logs_once_per_partition_and_interval(caplog):
    now = [0.0]
    metrics = Metrics()
    counter = metrics.counter("produce_disk_full_total", "refused")
    reporter = DiskFullReporter(7, counter, interval_s=60.0, clock=lambda: now[0])
    error = write_error(_no_space(), "cannot append 5 bytes to partition t-0 (f)", Path("/d/a"))
    assert isinstance(error, DiskFullError)
    with caplog.at_level(logging.ERROR, logger="logferry.broker"):
        messages = [reporter.refused("t", 0, error) for _ in range(1000)]
        reporter.refused("t", 1, error)
        now[0] = 61.0
        reporter.refused("t", 0, error)
    assert messages[0] == (
        "disk full on broker 7 (log dir /d/a): cannot append 5 bytes to partition t-0 (f): No space left on device"
    )
    assert counter[(("log_dir", "/d/a"),)] == 1002
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("t-0: produce refused, log dir /d/a is full")
    assert lines[1].startswith("t-1: ")
    assert "(999 more refused since the last report)" in lines[2]


def test_an_append_that_meets_a_full_disk_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    batch = records.encode_batch([b"x" * 100], None, 1)
    plog.append(batch, 1)
    real_write = os.write
    calls = []

    def half_then_full(fd, data):  # a disk that fills up in the middle of a batch
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise _no_space()

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(DiskFullError) as caught:
        plog.append(batch, 1)
    monkeypatch.undo()
    assert caught.value.log_dir == str(tmp_path)
    assert plog.end_offset == len(batch) and not plog.needs_recovery
    assert plog.segments[-1].path.stat().st_size == len(batch)  # the 10 bytes were cut
    assert plog.append(batch, 1) == len(batch)  # space again: writes go on
    plog.close()


async def _produce_on_a_full_disk(tmp_path, monkeypatch):
    dispatcher, metrics, logs, pool = _services(tmp_path, flush_messages=10_000)
    batch = records.encode_batch([b"a"], None, 1)

    def full(fd, data):
        raise _no_space()

    monkeypatch.setattr(os, "write", full)
    channel = Channel()
    head, frame = _request(protocol.PRODUCE, 1, {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
    dispatcher.handle_produce(head, frame, Responder(channel, 1, head.name, metrics.count_request))
    monkeypatch.undo()
    (answer,) = channel.frames()
    (part,) = parse_produce_answer(answer.header)
    assert part.error == DiskFullError.code and part.base_offset == -1
    assert part.message.startswith(f"disk full on broker 1 (log dir {tmp_path}): ")
    rendered = metrics.registry.render()
    assert f'logferry_produce_disk_full_total{{log_dir="{tmp_path}"}} 1' in rendered
    assert 'logferry_produce_errors_total{error="DiskFullError"} 1' in rendered
    pool.shutdown()
    logs.close()


def test_the_produce_handler_answers_disk_full_with_broker_and_log_dir(tmp_path, monkeypatch):
    asyncio.run(_produce_on_a_full_disk(tmp_path, monkeypatch))
