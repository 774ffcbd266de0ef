"""Unit tests of delivery and acknowledgement (broker.client.group.streams), backoff and znode formats.

No ZooKeeper, no broker: chunks are made by hand, as the fetcher would make them.
"""

from __future__ import annotations

import threading
import time

import pytest

from broker.client.consumer import Message
from broker.client.group.offsets import Committed
from broker.client.group.streams import (
    Chunk,
    ConsumerClosedError,
    GroupState,
    PartitionState,
    RawBatch,
    Reader,
    StreamQueue,
)
from broker.common.errors import ConfigError
from broker.common.names import validate_group_name


def _setup(partitions: int = 1, queue_bytes: int = 1 << 20):
    state = GroupState(queue_bytes)
    queue = StreamQueue(0)
    parts = []
    for p in range(partitions):
        ps = PartitionState("t", p, queue, 0, state.next_epoch(), state.generation, 1 << 20)
        ps.active = True
        ps.position = (0, 0)
        state.partitions[("t", p)] = ps
        parts.append(ps)
    return state, queue, parts


def _chunk(ps: PartitionState, offset: int, n: int, start: int = 0, size: int = 100) -> Chunk:
    msgs = [Message(ps.topic, ps.partition, offset, i, None, b"%d:%d" % (offset, i), 0) for i in range(n)]
    return Chunk(ps, ps.epoch, offset, offset + size, msgs, start, size)


def _put(queue: StreamQueue, *chunks: Chunk) -> None:
    for chunk in chunks:
        queue.chunks.append(chunk)
        queue.nbytes += chunk.nbytes


def test_position_moves_only_when_the_next_message_is_asked_for():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 3), _chunk(ps, 100, 2))
    reader = Reader(state, [queue], timeout=0.0)
    assert next(reader).value == b"0:0"
    with state.lock:
        state.materialize()
    assert ps.position == (0, 0)  # handed out, not processed
    next(reader)
    with state.lock:
        state.materialize()
    assert ps.position == (0, 1)
    next(reader)
    next(reader)  # first of the second batch: the whole first batch is processed
    with state.lock:
        state.materialize()
    assert ps.position == (100, 0)
    next(reader)
    with pytest.raises(StopIteration):
        next(reader)  # acknowledges the last one, then nothing is ready
    assert ps.position == (200, 0)


def test_resumed_batch_skips_processed_messages():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 5, start=3))
    reader = Reader(state, [queue], timeout=0.0)
    assert [m.index for m in reader] == [3, 4]
    assert ps.position == (100, 0)


def test_poll_acknowledges_the_previous_poll_only():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 4), _chunk(ps, 100, 4))
    reader = Reader(state, [queue], timeout=0.0)
    first = reader.poll(0, max_messages=6)
    assert len(first) == 6 and ps.position == (0, 0)
    with state.lock:
        assert reader.holds({id(ps)})
    second = reader.poll(0)
    assert [m.index for m in second] == [2, 3] and ps.position == (100, 2)
    assert reader.poll(0) == [] and ps.position == (200, 0)


def test_stop_drops_queued_batches_and_the_held_message_can_still_be_acknowledged():
    state, queue, (a, b) = _setup(2)
    _put(queue, _chunk(a, 0, 3), _chunk(b, 0, 3), _chunk(a, 100, 3))
    reader = Reader(state, [queue], timeout=0.0)
    assert next(reader).partition == 0
    with state.lock:
        state.stop([a])
        assert state.busy([a])  # its message is held by the application
        assert [c.state for c in queue.chunks] == [b]
    # The next call acknowledges it and moves on to partition 1; 0 is never delivered again.
    assert next(reader).partition == 1
    with state.lock:
        assert not state.busy([a])
    assert a.position == (0, 1)
    assert all(m.partition == 1 for m in reader)


def test_wait_idle_returns_when_the_application_asks_for_more():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 2))
    reader = Reader(state, [queue], timeout=0.5)
    next(reader)
    with state.lock:
        state.stop([ps])
    timer = threading.Timer(0.1, lambda: list(reader))
    timer.start()
    assert state.wait_idle([ps], timeout=5)  # True: woken idle, not timed out
    timer.join()
    assert ps.position == (0, 1)
    # Bounded: nobody acknowledges this one.
    _put(queue, _chunk(ps, 100, 2))
    with state.lock:
        ps.active = True
        ps.epoch = state.next_epoch()
        queue.chunks[-1].epoch = ps.epoch
    next(reader)
    with state.lock:
        state.stop([ps])
    assert not state.wait_idle([ps], timeout=0.2)


def test_released_partition_ignores_late_acknowledgements():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 3))
    reader = Reader(state, [queue], timeout=0.0)
    next(reader)
    next(reader)
    with state.lock:
        state.stop([ps])
        state.release([ps])
    frozen = ps.position
    assert list(reader) == []
    assert ps.position == frozen == (0, 1)


def test_paused_blocks_delivery_until_resumed_and_close_ends_iteration():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 3))
    reader = Reader(state, [queue], timeout=0.3)
    next(reader)
    with state.lock:
        state.paused = True
        state.invalidate_readers()
    with pytest.raises(StopIteration):
        next(reader)  # nothing is delivered while suspended
    with state.lock:
        state.paused = False
        state.invalidate_readers()
    assert next(reader).index == 1  # nothing was handed out while paused
    with state.lock:
        state.closed = True
        state.invalidate_readers()
    with pytest.raises(StopIteration):
        next(reader)
    assert reader.poll(0.1) == []


def test_a_dead_background_thread_fails_readers_loudly():
    state, queue, (ps,) = _setup()
    _put(queue, _chunk(ps, 0, 3))
    reader = Reader(state, [queue], timeout=0.0)
    next(reader)
    state.fail(RuntimeError("fetcher bug"))
    with pytest.raises(ConsumerClosedError, match="fetcher bug"):
        next(reader)


def test_drop_everything_forgets_partitions_and_queued_batches():
    state, queue, (a, b) = _setup(2)
    _put(queue, _chunk(a, 0, 3), _chunk(b, 0, 3))
    generation = state.generation
    with state.lock:
        dropped = state.drop_everything()
    assert {ps.tp for ps in dropped} == {("t", 0), ("t", 1)}
    assert not state.partitions and not queue.chunks and queue.nbytes == 0
    assert state.generation == generation + 1
    assert list(Reader(state, [queue], timeout=0.0)) == []


def test_reader_wakes_the_fetcher_when_its_queue_drains_below_the_bound():
    state, queue, (ps,) = _setup(queue_bytes=150)
    _put(queue, _chunk(ps, 0, 1), _chunk(ps, 100, 1))
    woken = threading.Event()

    def fetcher():
        with state.lock:
            state.fetch_wake.wait(5)
            woken.set()

    thread = threading.Thread(target=fetcher)
    thread.start()
    time.sleep(0.05)
    reader = Reader(state, [queue], timeout=0.0)
    next(reader)  # 200 -> 100 bytes queued: under the bound of 150
    thread.join(5)
    assert woken.is_set()


def test_committed_format_and_group_names():
    c = Committed(1234, 3, 1_700_000_000_000)
    assert Committed.decode(c.encode()) == c
    assert Committed.decode(b"42") == Committed(42, 0, 0)  # the paper's bare offset
    assert Committed.decode(b"") is None and Committed.decode(b"{") is None
    assert Committed.decode(b'{"offset": -1}') is None
    assert validate_group_name("mirror.live-1_a") == "mirror.live-1_a"
    for bad in ("", ".", "..", "a/b", "x" * 250):
        with pytest.raises(ConfigError):
            validate_group_name(bad)


def _raw_chunk(ps: PartitionState, offset: int, size: int = 100) -> Chunk:
    batch = RawBatch(offset, offset + size, 5, memoryview(b"x" * size))
    return Chunk(ps, ps.epoch, offset, offset + size, [batch], 0, size)  # type: ignore[list-item]


def test_raw_poll_without_acknowledging_keeps_batches_in_flight_until_acknowledged_through():
    state, queue, (a, b) = _setup(2)
    _put(queue, _raw_chunk(a, 0), _raw_chunk(b, 0), _raw_chunk(a, 100))
    reader = Reader(state, [queue], timeout=0.0)
    got = reader.poll_batches(0, acknowledge=False)
    assert [(tp, batch.offset) for tp, batch in got] == [(("t", 0), 0), (("t", 1), 0), (("t", 0), 100)]
    assert reader.poll_batches(0, acknowledge=False) == []  # polling again acknowledges nothing
    with state.lock:
        state.materialize()
        assert a.position == b.position == (0, 0)
        assert state.busy([a]) and state.busy([b])  # a rebalance waits for them
    reader.acknowledge_through({("t", 0): 100})  # only the first batch of partition 0
    assert a.position == (100, 0) and b.position == (0, 0)
    reader.acknowledge_through({("t", 0): 200, ("t", 1): 100})
    with state.lock:
        state.materialize()
        assert not state.busy([a, b])
    assert a.position == (200, 0) and b.position == (100, 0)


def test_raw_acknowledgement_of_a_released_partition_is_ignored():
    state, queue, (ps,) = _setup()
    _put(queue, _raw_chunk(ps, 0))
    reader = Reader(state, [queue], timeout=0.0)
    assert len(reader.poll_batches(0, acknowledge=False)) == 1
    with state.lock:
        state.stop([ps])
        state.release([ps])
    reader.acknowledge_through({("t", 0): 100})
    assert ps.position == (0, 0)
    with state.lock:
        assert not reader.holds({id(ps)})
