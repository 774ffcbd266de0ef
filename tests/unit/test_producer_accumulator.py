"""The producer's accumulator, without threads or sockets: a fake clock drives linger."""

from __future__ import annotations

import pytest

from broker.client.accumulator import Accumulator
from broker.common.errors import BufferFullError, ProducerClosedError, StorageError

TP = ("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 64.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **overrides) -> Accumulator:
    settings = dict(
        linger=0.25,
        batch_bytes=1000,
        batch_messages=3,
        buffer_bytes=10_000,
        block_timeout=0.0,
        max_request_bytes=10_000,
    )
    settings.update(overrides)
    return Accumulator(clock=clock, **settings)


def test_a_batch_waits_for_linger_then_is_ready() -> None:
    clock = Clock()
    acc = make(clock)
    future = acc.append(TP, [b"a"], 1, None, 7)
    drained, wake = acc.ready(clock.now)
    assert drained == {} and wake == pytest.approx(0.25)
    clock.now += 0.25
    drained, _ = acc.ready(clock.now)
    [batch] = drained[TP]
    assert batch.values == [b"a"] and batch.timestamps == [7] and batch.future is future
    assert acc.unfinished == 1 and acc.buffered == 1


def test_full_batches_are_ready_at_once_and_a_send_spans_batches() -> None:
    clock = Clock()
    acc = make(clock)
    future = acc.append(TP, [b"a", b"b", b"c", b"d"], 4, b"k", 1)
    drained, _ = acc.ready(clock.now)  # the first is full (3 messages), a second follows
    batches = drained[TP]
    assert [b.values for b in batches] == [[b"a", b"b", b"c"], [b"d"]]
    assert batches[-1].future is future and batches[0].keys == [b"k"] * 3
    assert acc.unfinished == 2


def test_keys_are_filled_with_none_once_a_keyed_message_joins() -> None:
    acc = make(Clock(), batch_messages=10)
    acc.append(TP, [b"a"], 1, None, 1)
    acc.append(TP, [b"b"], 1, b"k", 1)
    drained, _ = acc.ready(Clock().now + 1)
    assert drained[TP][0].keys == [None, b"k"]


def test_one_request_in_flight_per_partition_and_retry_keeps_order() -> None:
    clock = Clock()
    acc = make(clock, linger=0.0)
    acc.append(TP, [b"a"], 1, None, 1)
    first = acc.ready(clock.now)[0][TP]
    acc.append(TP, [b"b"], 1, None, 1)
    assert acc.ready(clock.now)[0] == {}  # TP is in flight
    acc.retry(TP, first, at=clock.now + 1.0)
    drained, wake = acc.ready(clock.now)
    assert drained == {} and wake == pytest.approx(0.5)  # backing off (wakes at most 0.5 s apart)
    clock.now += 1.0
    again = acc.ready(clock.now)[0][TP]
    assert [b.values for b in again] == [[b"a"], [b"b"]]  # the retried batch first
    acc.done(TP, again)
    assert acc.unfinished == 0 and acc.buffered == 0


def test_failure_takes_the_partitions_queued_batches_along() -> None:
    clock = Clock()
    acc = make(clock, linger=0.0)
    acc.append(TP, [b"a"], 1, None, 1)
    acc.append(("t", 1), [b"x"], 1, None, 1)
    taken = acc.ready(clock.now)[0][TP]
    later = acc.append(TP, [b"b"], 1, None, 1)
    failed = acc.fail(TP, taken)
    assert [b.values for b in failed] == [[b"a"], [b"b"]] and failed[1].future is later
    assert acc.unfinished == 1  # t-1 is untouched


def test_requests_are_capped_by_max_request_bytes() -> None:
    clock = Clock()
    acc = make(clock, batch_messages=1, max_request_bytes=5)
    acc.append(TP, [b"aaa", b"bb", b"c"], 6, None, 1)
    assert [b.values for b in acc.ready(clock.now)[0][TP]] == [[b"aaa"], [b"bb"]]


def test_raw_batches_are_ready_at_once() -> None:
    clock = Clock()
    acc = make(clock, linger=10.0)
    future = acc.append_raw(TP, b"\x00" * 30, 4)
    [batch] = acc.ready(clock.now)[0][TP]
    assert batch.raw and batch.messages == 4 and batch.future is future and acc.buffered == 30


def test_flushing_makes_everything_ready() -> None:
    clock = Clock()
    acc = make(clock, linger=10.0)
    acc.append(TP, [b"a"], 1, None, 1)
    acc._flushing = 1
    assert TP in acc.ready(clock.now)[0]


def test_full_buffer_blocks_then_raises() -> None:
    acc = make(Clock(), buffer_bytes=3, block_timeout=0.0)
    acc.append(TP, [b"abc"], 3, None, 1)
    with pytest.raises(BufferFullError, match="buffer full"):
        acc.append(TP, [b"d"], 1, None, 1)


def test_an_append_larger_than_the_buffer_passes_when_it_is_empty() -> None:
    acc = make(Clock(), buffer_bytes=3)
    acc.append(TP, [b"abcdef"], 6, None, 1)
    assert acc.buffered == 6


def test_closed_or_dead_refuses_appends_and_next_ready_ends() -> None:
    acc = make(Clock())
    acc.close()
    with pytest.raises(ProducerClosedError, match="closed"):
        acc.append(TP, [b"a"], 1, None, 1)
    assert acc.next_ready(0) is None
    dead = make(Clock())
    dead.set_fatal(StorageError("boom"))
    with pytest.raises(ProducerClosedError, match="died: boom"):
        dead.append(TP, [b"a"], 1, None, 1)


def test_abort_all_returns_and_releases_everything_queued() -> None:
    acc = make(Clock())
    acc.append(TP, [b"a"], 1, None, 1)
    acc.append(("u", 0), [b"b"], 1, None, 1)
    assert len(acc.abort_all()) == 2 and acc.unfinished == 0 and acc.buffered == 0
