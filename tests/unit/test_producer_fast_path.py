"""The producer's fast path and what it rests on, without threads or sockets.

``accumulator.fast_send`` (one keyless message into a partition's open batch), the
open-batch bookkeeping it relies on, timestamps kept as runs of equal milliseconds,
``records.encode_batch_deltas`` and the scatter-gather write of a request's parts.
"""

from __future__ import annotations

import socket
import threading

import pytest

from broker.client.accumulator import Accumulator, ProducerBatch, fast_send
from broker.client.connection import _send_parts
from broker.common.errors import BufferFullError, ConfigError, ProducerClosedError, StorageError
from broker.wire import records

TP = ("t", 0)
T0 = 1_700_000_000.0  # an epoch time in seconds, as time.time() gives it


class Clock:
    def __init__(self) -> None:
        self.now = 64.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock | None = None, **overrides) -> Accumulator:
    settings = dict(
        linger=0.25,
        batch_bytes=1000,
        batch_messages=3,
        buffer_bytes=10_000,
        block_timeout=0.0,
        max_request_bytes=10_000,
    )
    settings.update(overrides)
    return Accumulator(clock=clock or Clock(), **settings)


def fast_append(acc: Accumulator, tp: tuple[str, int], value: bytes, now: float):
    """One message through the fast path of ``send`` (accumulator.fast_send) at time
    ``now``; None where ``send`` would take its general path."""
    send = fast_send(acc, lambda topic: None, lambda *args: None, clock=lambda: now)
    return send(tp[0], value, partition=tp[1])


def decoded(batch: ProducerBatch) -> records.Batch:
    [out], _ = records.decode_batches(bytes(batch.encode(records.CODEC_NONE)), 0)
    return out


def test_fast_append_needs_an_open_batch_then_joins_it() -> None:
    acc = make()
    assert fast_append(acc, TP, b"a", T0) is None  # nothing open: the caller appends
    future = acc.append(TP, [b"a"], 1, None, int(T0 * 1000))
    assert fast_append(acc, TP, b"b", T0 + 0.0001) is future
    [batch] = acc.ready(acc.clock() + 1)[0][TP]
    assert batch.values == [b"a", b"b"] and acc.buffered == 2 and acc.unfinished == 1


def test_a_batch_filled_by_the_fast_path_closes_and_is_ready() -> None:
    clock = Clock()
    acc = make(clock, linger=10.0)
    acc.append(TP, [b"a"], 1, None, 1)
    fast_append(acc, TP, b"b", T0)
    assert fast_append(acc, TP, b"c", T0) is not None
    assert TP not in acc.open and fast_append(acc, TP, b"d", T0) is None  # full: no room
    drained, _ = acc.ready(clock.now)
    assert [b.values for b in drained[TP]] == [[b"a", b"b", b"c"]]  # full: ready at once
    acc.append(TP, [b"d"], 1, None, 1)
    assert acc.open[TP].values == [b"d"]


def test_batch_bytes_closes_a_batch_too() -> None:
    acc = make(batch_messages=100, batch_bytes=4)
    acc.append(TP, [b"aa"], 2, None, 1)
    fast_append(acc, TP, b"bb", T0)
    assert TP not in acc.open


def test_the_fast_path_leaves_keyed_batches_and_full_buffers_to_append() -> None:
    acc = make(batch_messages=10, buffer_bytes=3)
    acc.append(TP, [b"a"], 1, b"k", 1)
    assert fast_append(acc, TP, b"b", T0) is None  # keys column: append fills in None
    acc.append(TP, [b"b"], 1, None, 1)
    assert acc.open[TP].keys == [b"k", None]
    other = ("t", 1)
    acc.append(other, [b"x"], 1, None, 1)
    assert fast_append(acc, other, b"y", T0) is None  # 4 bytes > buffer_bytes = 3
    with pytest.raises(BufferFullError):
        acc.append(other, [b"y"], 1, None, 1)


def test_no_fast_append_once_closed_or_dead() -> None:
    acc = make()
    acc.append(TP, [b"a"], 1, None, 1)
    acc.close()
    assert fast_append(acc, TP, b"b", T0) is None
    with pytest.raises(ProducerClosedError):
        acc.append(TP, [b"b"], 1, None, 1)
    dead = make()
    dead.append(TP, [b"a"], 1, None, 1)
    dead.set_fatal(StorageError("boom"))
    assert fast_append(dead, TP, b"b", T0) is None


def test_a_taken_batch_takes_no_more_messages() -> None:
    clock = Clock()
    acc = make(clock, linger=0.0, batch_messages=10)
    acc.append(TP, [b"a"], 1, None, 1)
    [taken] = acc.ready(clock.now)[0][TP]
    assert fast_append(acc, TP, b"b", T0) is None
    acc.append(TP, [b"b"], 1, None, 1)
    assert taken.values == [b"a"] and acc.open[TP] is not taken


def test_a_raw_batch_ends_the_open_batch_so_order_is_kept() -> None:
    clock = Clock()
    acc = make(clock, batch_messages=10)
    acc.append(TP, [b"a"], 1, None, 1)
    acc.append_raw(TP, records.encode_batch([b"r"], None, 1), 1)
    assert fast_append(acc, TP, b"b", T0) is None
    acc.append(TP, [b"b"], 1, None, 1)
    drained = acc.ready(clock.now)[0][TP]
    assert [b.raw for b in drained] == [False, True, False]
    assert drained[0].values == [b"a"] and drained[2].values == [b"b"]


def test_failure_and_abort_close_the_open_batch() -> None:
    clock = Clock()
    acc = make(clock, linger=0.0, batch_messages=10)
    acc.append(TP, [b"a"], 1, None, 1)
    taken = acc.ready(clock.now)[0][TP]
    acc.append(TP, [b"b"], 1, None, 1)
    acc.fail(TP, taken)
    assert TP not in acc.open
    acc.append(TP, [b"c"], 1, None, 1)
    acc.abort_all()
    assert acc.open == {} and fast_append(acc, TP, b"d", T0) is None


def test_fast_appends_from_many_threads_lose_nothing() -> None:
    acc = make(batch_messages=50, buffer_bytes=1 << 30, batch_bytes=1 << 20, max_request_bytes=1 << 30)
    per_thread = 2000

    def produce(n: int) -> None:
        for i in range(per_thread):
            value = b"%d-%d" % (n, i)
            if fast_append(acc, TP, value, T0) is None:
                acc.append(TP, [value], len(value), None, int(T0 * 1000))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    acc._flushing = 1
    values = [v for batches in acc.ready(acc.clock())[0].values() for b in batches for v in b.values]
    assert len(values) == 4 * per_thread
    for n in range(4):  # each thread's messages in its order
        mine = [v for v in values if v.startswith(b"%d-" % n)]
        assert mine == [b"%d-%d" % (n, i) for i in range(per_thread)]


def test_fast_appends_are_counted_exactly_in_buffered_and_in_the_batch() -> None:
    acc = make(batch_messages=100, batch_bytes=1000, buffer_bytes=10_000)
    acc.append(TP, [b"a" * 10], 10, None, 1)
    batch = acc.open[TP]
    assert batch.room == 0  # no grant for a list: the first fast send asks for one
    for size in (1, 2, 3, 4):
        assert fast_append(acc, TP, b"b" * size, T0) is batch.future
        assert batch.room > 0  # a grant: the next fast appends need no other check
    assert acc.buffered == 20 and acc.unfinished == 1
    [taken] = acc.ready(acc.clock() + 1)[0][TP]
    assert taken is batch and batch.nbytes == 20 and batch.room == 0 and acc.buffered == 20
    acc.done(TP, [taken])
    assert acc.buffered == 0 and acc._committed == 0 and acc._granted == 0


def test_grants_never_make_the_buffer_refuse_what_fits() -> None:
    """Unused grants count as used only until something needs the space: then every
    grant is given back, so buffer_bytes binds on the bytes queued, exactly as before."""
    acc = make(batch_messages=100, batch_bytes=1000, buffer_bytes=1600)
    acc.append(TP, [b"a" * 5], 5, None, 1)
    fast_append(acc, TP, b"a" * 5, T0)
    acc.append(("t", 1), [b"b" * 5], 5, None, 1)
    fast_append(acc, ("t", 1), b"b" * 5, T0)
    assert acc._committed > acc.buffered == 20  # two grants outstanding
    acc.append(("t", 2), [b"c" * 1570], 1570, None, 1)  # fits only without the grants
    assert acc.buffered == acc._committed == 1590 and acc.open[TP].room == 0
    assert fast_append(acc, TP, b"d" * 10, T0) is not None  # exactly full: still fits
    assert acc.buffered == 1600
    assert fast_append(acc, TP, b"e", T0) is None  # over: send() takes append(), which waits
    with pytest.raises(BufferFullError):
        acc.append(TP, [b"e"], 1, None, 1)


def test_no_grant_fills_a_batch_the_fast_path_would_not_close() -> None:
    """A grant stops one byte short of batch_bytes: the message that fills a batch goes
    through the exact checks, which close it (and wake the sender) at once."""
    acc = make(batch_messages=100, batch_bytes=10, buffer_bytes=10_000)
    acc.append(TP, [b"a"], 1, None, 1)
    fast_append(acc, TP, b"b", T0)
    assert acc.open[TP].room == 7  # 10 - 1 - 2 bytes
    fast_append(acc, TP, b"b" * 7, T0)
    assert TP in acc.open and acc.open[TP].room == 0
    fast_append(acc, TP, b"c", T0)  # 10 bytes: full
    assert TP not in acc.open
    [full] = acc.ready(acc.clock())[0][TP]
    assert full.nbytes == 10 and full.values == [b"a", b"b", b"b" * 7, b"c"]


def test_fast_sends_racing_a_draining_sender_lose_nothing_and_free_everything() -> None:
    """Four threads send through fast_send while a fifth takes and finishes batches, as
    the sender does, through a buffer far smaller than what they send: the bound holds,
    every message arrives once, each thread's in its order, and when all is done no byte
    stays counted (grants settled, space freed)."""
    acc = Accumulator(
        linger=0.0005,
        batch_bytes=600,
        batch_messages=40,
        buffer_bytes=20_000,
        block_timeout=10.0,
        max_request_bytes=5_000,
    )
    general = []

    def general_path(topic, messages, key=None, partition=None, timestamp=None):
        general.append(1)
        value = messages[0] if isinstance(messages, list) else messages
        return acc.append((topic, partition), [value], len(value), None, 1)

    send = fast_send(acc, lambda topic: None, general_path)
    per_thread, taken, peak = 3000, [], [0]
    stop = threading.Event()

    def sender() -> None:
        while not stop.is_set() or acc.unfinished:
            with acc.lock:
                peak[0] = max(peak[0], acc.buffered)
            drained = acc.next_ready(0.01) or {}
            for tp, batches in drained.items():
                taken.extend(v for b in batches for v in b.values)
                acc.done(tp, batches)

    def produce(n: int) -> None:
        for i in range(per_thread):
            send("t", b"%d-%d" % (n, i) + b"." * (i % 13), partition=0)

    drain = threading.Thread(target=sender)
    drain.start()
    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    acc.flush(10)
    stop.set()
    drain.join(10)
    assert len(taken) == 4 * per_thread and general  # both paths were taken
    assert 0 < peak[0] <= acc.buffer_bytes
    for n in range(4):
        mine = [v.rstrip(b".") for v in taken if v.startswith(b"%d-" % n)]
        assert mine == [b"%d-%d" % (n, i) for i in range(per_thread)]
    assert acc.buffered == 0 and acc._committed == 0 and acc._granted == 0


# -- timestamps as runs -------------------------------------------------------------------


def test_messages_in_one_millisecond_share_a_run_and_encode_without_deltas() -> None:
    acc = make(batch_messages=10)
    acc.append(TP, [b"a"], 1, None, int(T0 * 1000))
    fast_append(acc, TP, b"b", T0 + 0.0002)
    fast_append(acc, TP, b"c", T0 + 0.0009)
    batch = acc.open[TP]
    assert batch.ts_runs == [0, int(T0 * 1000)] and batch.timestamps == [int(T0 * 1000)] * 3
    out = decoded(batch)
    assert out.deltas is None and out.base_timestamp == int(T0 * 1000)


def test_each_message_keeps_its_own_millisecond() -> None:
    acc = make(batch_messages=10)
    base = int(T0 * 1000)
    acc.append(TP, [b"a", b"b"], 2, None, base)
    fast_append(acc, TP, b"c", T0 + 0.0015)  # 1 ms later
    fast_append(acc, TP, b"d", T0 + 0.0051)  # 5 ms later
    fast_append(acc, TP, b"e", T0 + 0.0004)  # the wall clock stepped back: kept
    acc.append(TP, [b"f"], 1, None, 7)  # an explicit timestamp
    fast_append(acc, TP, b"g", T0 + 0.0004)
    batch = acc.open[TP]
    expected = [base, base, base + 1, base + 5, base, 7, base]
    assert batch.timestamps == expected
    assert decoded(batch).timestamps == expected


def test_stamp_merges_equal_runs() -> None:
    batch = ProducerBatch(0.0)
    batch.values += [b"a", b"b", b"c"]
    batch.stamp(5, 0)
    batch.stamp(5, 1)
    batch.stamp(6, 2)
    assert batch.ts_runs == [0, 5, 2, 6] and batch.timestamps == [5, 5, 6]
    assert (batch.ts_start, batch.ts_end) == (0.006, 0.007)


# -- encoding --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [records.CODEC_NONE, records.CODEC_GZIP])
@pytest.mark.parametrize("deltas", [None, [0, 3, 3]])
@pytest.mark.parametrize("repeat", [1, records.SMALL_BATCH])  # both ways of packing
def test_encode_batch_deltas_is_encode_batch(codec: int, deltas: list[int] | None, repeat: int) -> None:
    values, keys = [b"a", b"bb", b"c"] * repeat, [None, b"k", None] * repeat
    deltas = deltas and deltas * repeat
    timestamps = [100 + d for d in (deltas or [0, 0, 0] * repeat)]
    made = records.encode_batch_deltas(values, keys, 100, deltas, codec)
    assert bytes(made) == records.encode_batch(values, keys, timestamps, codec)
    [out], used = records.decode_batches(bytes(made), 0)
    assert used == len(made) and out.values == values and out.timestamps == timestamps


def test_encode_batch_deltas_reuses_nothing_it_returned() -> None:
    many = records.SMALL_BATCH
    first = records.encode_batch_deltas([b"x" * 100] * many, None, 1, None)
    kept = bytes(first)
    records.encode_batch_deltas([b"y" * 300] * many, None, 2, None)
    assert bytes(first) == kept


def test_encode_batch_deltas_from_many_threads() -> None:
    def encode(n: int) -> None:
        for i in range(200):
            values = [b"%d-%d" % (n, i)] * records.SMALL_BATCH
            [out], _ = records.decode_batches(bytes(records.encode_batch_deltas(values, None, i, None)), 0)
            results[n] += out.values == values and out.base_timestamp == i

    results = [0] * 4
    threads = [threading.Thread(target=encode, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 4


def test_encode_batch_deltas_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError):
        records.encode_batch_deltas([], None, 1, None)


# -- scatter-gather writes -------------------------------------------------------------


def test_send_parts_writes_every_part_in_order() -> None:
    left, right = socket.socketpair()
    parts: list[bytes | memoryview] = [b"head", b"", memoryview(b"x" * 3_000_000), b"tail"]
    parts += [bytes([i % 256]) for i in range(2500)]  # more than one sendmsg takes
    expected = b"".join(parts)
    received = bytearray()

    def read() -> None:
        while len(received) < len(expected):
            chunk = right.recv(1 << 16)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        _send_parts(left, parts)
        reader.join(10)
    finally:
        left.close()
        right.close()
    assert bytes(received) == expected


def test_close_open_sends_a_topics_next_messages_down_the_checked_path() -> None:
    acc = make(batch_messages=10)
    acc.append(TP, [b"a"], 1, None, 1)
    acc.append(("u", 0), [b"x"], 1, None, 1)
    acc.close_open("t")
    assert fast_append(acc, TP, b"b", T0) is None and ("u", 0) in acc.open
    acc.append(TP, [b"b"], 1, None, 1)
    acc._flushing = 1
    assert [b.values for b in acc.ready(acc.clock())[0][TP]] == [[b"a"], [b"b"]]


# -- pooled buffers ----------------------------------------------------------------------


def test_buffer_pool_reuses_buffers_that_fit_and_stays_bounded() -> None:
    from broker.client.buffers import BufferPool

    pool = BufferPool(keep_bytes=1000, max_bytes=600)
    first = pool.take(100)
    assert len(first) >= 100
    pool.give(first)
    assert pool.kept_bytes == len(first)
    assert pool.take(90) is first  # fits: reused
    assert pool.kept_bytes == 0
    pool.give(first)
    bigger = pool.take(500)  # the small one is dropped
    assert bigger is not first and len(bigger) >= 500 and len(pool) == 0
    assert pool.kept_bytes == 0
    pool.give(bytearray(700))  # over max_bytes: not kept
    assert len(pool) == 0
    for _ in range(4):
        pool.give(bytearray(300))  # the fourth would hold 1200 bytes: over keep_bytes
    assert len(pool) == 3 and pool.kept_bytes == 900
    pool.give(bytearray(100))  # still fits
    assert len(pool) == 4 and pool.kept_bytes == 1000


def test_buffer_pool_keeps_a_request_of_default_batches() -> None:
    """The producer's defaults (256 KiB batches, 16 MiB requests): all of a full
    request's batch buffers come back to the pool and are reused, none made anew."""
    from broker.client.buffers import BufferPool

    pool = BufferPool()
    batch = 256 * 1024
    first = [pool.take(batch) for _ in range(56)]  # 56 x 288 KiB: 15.75 MiB
    for buf in first:
        pool.give(buf)
    again = [pool.take(batch) for _ in range(56)]
    assert {id(b) for b in again} == {id(b) for b in first}


def test_large_batches_are_encoded_into_pooled_buffers_given_back_when_done() -> None:
    clock = Clock()
    many = records.SMALL_BATCH
    acc = make(
        clock, linger=0.0, batch_messages=many, batch_bytes=1 << 20, buffer_bytes=1 << 20, max_request_bytes=1 << 20
    )
    acc.append(TP, [b"a" * 50] * many, 50 * many, None, 5)
    [first] = acc.ready(clock.now)[0][TP]
    encoded = bytes(first.encode(records.CODEC_NONE, acc.buffers))
    assert first.buffer is not None and len(acc.buffers) == 0
    [out], _ = records.decode_batches(encoded, 0)
    assert out.values == [b"a" * 50] * many and out.base_timestamp == 5
    buffer = first.buffer
    acc.done(TP, [first])
    assert len(acc.buffers) == 1 and first.buffer is None and first.encoded is None
    acc.append(TP, [b"b" * 40] * many, 40 * many, None, 6)
    [second] = acc.ready(clock.now)[0][TP]
    again = bytes(second.encode(records.CODEC_NONE, acc.buffers))
    assert second.buffer is buffer  # the same memory, the new batch's bytes
    [out], _ = records.decode_batches(again, 0)
    assert out.values == [b"b" * 40] * many and out.base_timestamp == 6
    failed = acc.fail(TP, [second])
    assert failed == [second] and len(acc.buffers) == 1


def test_small_batches_take_no_pooled_buffer() -> None:
    clock = Clock()
    acc = make(clock, linger=0.0)
    acc.append(TP, [b"a"], 1, None, 5)
    [batch] = acc.ready(clock.now)[0][TP]
    assert type(batch.encode(records.CODEC_NONE, acc.buffers)) is bytes and batch.buffer is None


# -- Producer.send, both paths ----------------------------------------------------------


def test_producer_send_takes_the_fast_path_with_the_general_paths_checks() -> None:
    from broker.client import Producer
    from broker.common.errors import UnknownTopicOrPartitionError

    # No broker listens on port 9: nothing is delivered, and with retries=0 every batch
    # fails at once, so close() does not wait. The partition count is known up front.
    producer = Producer(brokers=["127.0.0.1:9"], linger_ms=60_000, retries=0)
    try:
        producer._partition_counts["t"] = 2
        first = producer.send("t", b"a", partition=0)  # opens the batch: general path
        assert producer.send("t", b"b", partition=0) is first  # fast: bytes
        assert producer.send("t", [b"c"], partition=0) is first  # fast: a list of one
        assert producer.send("t", [b"d", b"e"], partition=0) is first  # general: several
        assert producer.send("t", b"f", key=b"k", partition=0) is first  # general: a key
        assert producer.send("t", b"g", partition=0) is first  # keyed batch: general
        for bad in (2, -1):
            with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0-1"):
                producer.send("t", b"x", partition=bad)
        acc = producer._accumulator
        batch = acc.open[("t", 0)]
        assert batch.values == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
        assert batch.keys == [None] * 5 + [b"k", None]
        stamps = batch.timestamps
        assert len(stamps) == 7 and stamps == sorted(stamps)
        producer.send("t", b"r")  # round robin, general then fast path
        producer.send("t", b"r")
        producer.send("t", b"r")
        assert sum(len(b.values) for b in acc.open.values()) == 10
    finally:
        producer.close(timeout=30)
    with pytest.raises(ProducerClosedError):
        producer.send("t", b"z", partition=0)


def test_the_class_method_send_is_the_general_path_with_the_same_result() -> None:
    """Each Producer installs accumulator.fast_send as its ``send``; the documented
    method (the general path) joins the same open batch."""
    from broker.client import Producer

    producer = Producer(brokers=["127.0.0.1:9"], linger_ms=60_000, retries=0)
    try:
        producer._partition_counts["t"] = 1
        first = producer.send("t", b"a", partition=0)
        assert Producer.send(producer, "t", b"b", partition=0) is first
        assert producer.send("t", b"c") is first  # round robin over one partition
        assert producer._accumulator.open[("t", 0)].values == [b"a", b"b", b"c"]
    finally:
        producer.close(timeout=30)


def test_acks_set_after_construction_reaches_the_sender() -> None:
    """The benchmark sends with acks=0 and waits on a last acks=1 message: the switch
    must reach the sender thread, which builds the requests."""
    from broker.client import Producer

    producer = Producer(brokers=["127.0.0.1:9"], acks=0)
    try:
        assert producer.acks == 0
        producer.acks = "all"
        assert producer.acks == -1 and producer._sender.acks == -1
        with pytest.raises(ConfigError):
            producer.acks = 2
        assert producer._sender.acks == -1
    finally:
        producer.close(0.1)


# -- batches of one message (batch_messages=1) --------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 200, 255, 256, 65_535, 65_536])
@pytest.mark.parametrize("ms", [0, 1_700_000_000_123, -5])
def test_encode_single_is_encode_batch_deltas_of_one_message(size: int, ms: int) -> None:
    value = bytes(i % 251 for i in range(size))
    encoded = records.encode_single(value, ms)
    assert encoded == bytes(records.encode_batch_deltas([value], None, ms, None))
    [batch], used = records.decode_batches(encoded, 0)
    assert used == len(encoded) and batch.values == [value] and batch.timestamps == [ms]


def single_send(acc: Accumulator, general=lambda *args: None):
    """``send`` as a Producer with batch_messages=1 builds it (encode_single given)."""
    return fast_send(
        acc, lambda topic: 0, general, clock=lambda: T0, encode_single=records.encode_single, partition_counts={"t": 2}
    )


def test_one_message_batches_are_queued_encoded_in_order_each_with_its_future() -> None:
    acc = make(batch_messages=1)
    send = single_send(acc)
    futures = [send("t", bytes([i])) for i in range(5)]
    assert len(set(map(id, futures))) == 5 and acc.unfinished == 5 and acc.buffered == 5
    assert not acc.open  # nothing stays open: each message is a batch
    batches = acc.ready(acc.clock())[0][TP]
    assert [b.future for b in batches] == futures
    assert [decoded(b).values for b in batches] == [[bytes([i])] for i in range(5)]
    assert all(b.encoded == records.encode_single(b.values[0], int(T0 * 1000)) for b in batches)
    assert sum(b.messages for b in batches) == 5
    assert all(b.timestamps == [int(T0 * 1000)] for b in batches)
    acc.done(TP, batches)
    assert acc.unfinished == 0 and acc.buffered == 0


def test_one_message_batches_leave_full_buffers_closed_producers_and_open_batches_to_append() -> None:
    general_calls = []
    acc = make(batch_messages=1, buffer_bytes=10)
    send = single_send(acc, lambda *args: general_calls.append(args))
    assert send("t", b"12345678") is not None
    assert send("t", b"abc") is None and len(general_calls) == 1  # no room: append() waits
    assert send("t", [b"a", b"b"]) is None and len(general_calls) == 2  # several messages
    assert send("t", bytearray(b"a")) is None and len(general_calls) == 3  # not bytes
    acc.batch_messages = 2  # (a producer never changes it: only to open a batch here)
    acc.append(("t", 1), [b"o"], 1, None, 0)
    assert send("t", b"x") is None and len(general_calls) == 4  # the topic has an open batch
    acc.close()
    assert send("t", b"y") is None and len(general_calls) == 5
    with pytest.raises(ProducerClosedError):
        acc.append(TP, [b"y"], 1, None, 0)


def test_one_message_batches_keep_order_with_appended_and_raw_batches_and_retries() -> None:
    acc = make(batch_messages=1)
    send = single_send(acc)
    send("t", b"1")
    acc.append(TP, [b"2"], 1, None, int(T0 * 1000))
    acc.append_raw(TP, records.encode_batch([b"3"], None, 0), 1)
    send("t", b"4")
    first = acc.ready(acc.clock())[0][TP]
    acc.retry(TP, first[:2], at=acc.clock())  # back to the front, as a failed send does
    acc._in_flight.discard(TP)
    again = acc.ready(acc.clock())[0][TP]
    assert [decoded(b).values[0] for b in again] == [b"1", b"2", b"3", b"4"][: len(again)]


def test_producer_uses_one_message_batches_only_where_they_are_the_same_bytes() -> None:
    import inspect

    from broker.client import Producer

    def single(**options) -> bool:
        """Whether the producer's send() encodes one-message batches itself (looked up
        in its closure: the sender thread may take a queued batch at any moment)."""
        producer = Producer(brokers=["127.0.0.1:9"], retries=0, metadata_max_age_s=0, **options)
        try:
            encoder = inspect.getclosurevars(producer.send).nonlocals["encode_single"]
            return encoder is records.encode_single
        finally:
            producer.close(timeout=30)

    assert single(batch_messages=1, acks=0, linger_ms=60_000)
    assert not single(batch_messages=2, acks=0, linger_ms=60_000)
    assert not single(batch_messages=1, acks=0, compression="gzip", linger_ms=60_000)
    assert not single(batch_messages=1, acks="all", linger_ms=60_000)  # idempotent: numbered


def test_one_message_batches_go_only_to_partitions_the_producer_knows() -> None:
    general_calls = []
    acc = make(batch_messages=1)
    send = single_send(acc, lambda *args: general_calls.append(args))
    assert send("t", b"a", partition=1) is not None and not general_calls
    assert send("t", b"b", partition=2) is None and len(general_calls) == 1  # out of range
    assert send("t", b"c", partition=-1) is None and len(general_calls) == 2
    assert send("new", b"d", partition=0) is None and len(general_calls) == 3  # unknown topic
    assert acc.unfinished == 1


def test_producer_with_one_message_batches_checks_topics_and_partitions() -> None:
    from broker.client import Producer
    from broker.common.errors import LogferryError, UnknownTopicOrPartitionError

    # Nothing listens on port 9: learning a new topic's partitions fails loudly.
    producer = Producer(
        brokers=["127.0.0.1:9"], batch_messages=1, acks=0, retries=0, metadata_max_age_s=0, request_timeout=2
    )
    try:
        producer._partition_counts["t"] = 2
        with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0-1"):
            producer.send("t", b"x", partition=2)
        with pytest.raises(LogferryError):
            producer.send("unknown", b"x", partition=0)  # never queued unchecked
        assert producer._accumulator.unfinished == 0
    finally:
        producer.close(timeout=30)


def test_a_one_message_batch_is_its_own_future_and_drops_its_bytes_when_finished() -> None:
    from broker.client.accumulator import EncodedOne
    from broker.client.delivery import DeliveryFuture

    acc = make(batch_messages=1)
    send = single_send(acc)
    future = send("t", b"abc")
    assert isinstance(future, DeliveryFuture) and isinstance(future, EncodedOne)
    [batch] = acc.ready(acc.clock())[0][TP]
    assert batch is future and batch.future is future and batch.messages == 1
    assert batch.values == [b"abc"] and batch.encoded == records.encode_single(b"abc", int(T0 * 1000))
    future._complete(7)
    acc.done(TP, [batch])
    assert future.wait(0) == 7 and batch.encoded is None and batch.values == []


def test_taking_a_whole_queue_of_one_message_batches_keeps_the_request_bound() -> None:
    acc = make(batch_messages=1, max_request_bytes=25)
    send = single_send(acc)
    futures = [send("t", b"0123456789") for _ in range(5)]
    first = acc.ready(acc.clock())[0][TP]
    assert first == futures[:2]  # 20 bytes; a third would pass 25
    acc.done(TP, first)
    acc2 = make(batch_messages=1)
    send2 = single_send(acc2)
    all_of_them = [send2("t", bytes([i])) for i in range(5)]
    assert acc2.ready(acc2.clock())[0][TP] == all_of_them and not acc2._queues[TP]


def test_one_message_sends_wake_a_waiting_sender_once() -> None:
    acc = make(batch_messages=1)
    notified = []
    acc._wake.notify = lambda n=1: notified.append(n)  # type: ignore[method-assign]
    send = single_send(acc)
    acc._sender_waiting = True  # as next_ready() sets it while it waits
    send("t", b"a")
    send("t", b"b")
    assert notified == [1] and not acc._sender_waiting


def test_producer_sends_one_message_batches_to_partitions_it_learned_after_it_was_made() -> None:
    from broker.client import Producer
    from broker.client.accumulator import EncodedOne

    producer = Producer(
        brokers=["127.0.0.1:9"],
        batch_messages=1,
        acks=0,
        retries=0,
        metadata_max_age_s=0,
        request_timeout=2,
        linger_ms=60_000,
    )
    try:
        producer._partition_counts["t"] = 2  # learned now: the fast path reads the same dict
        futures = [producer.send("t", b"x", partition=1), producer.send("t", b"y")]
        assert all(type(f) is EncodedOne for f in futures)  # not the general path's batches
    finally:
        producer.close(timeout=30)  # nothing listens: retries=0 fails them at once
