"""Producing and consuming through real broker processes: counts, order, restarts, crashes.

Tests that only use their own topics share the module's broker (``module_cluster``);
those that stop, kill, pause or reconfigure a broker start their own."""

from __future__ import annotations

import struct
import threading
import time
import zlib

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.common.errors import CorruptBatchError, OffsetOutOfRangeError, RequestTimedOutError
from broker.wire import records
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _value(i: int) -> bytes:
    return b"msg-%07d-" % i + bytes([65 + (i % 26)]) * (i % 50)


def _consume_all(consumer: SimpleConsumer, topic: str, expected: int) -> dict[int, list[bytes]]:
    """Read every partition until ``expected`` messages in all, or 5 s without news.

    Consumers see only flushed data, so right after producing the last batches may
    not be visible yet: follow the partitions instead of stopping at the visible end.
    """
    out: dict[int, list[bytes]] = {p: [] for p in consumer.partitions(topic)}
    offsets = {p: 0 for p in out}
    deadline = time.monotonic() + 60
    quiet_since = time.monotonic()
    while sum(map(len, out.values())) < expected and time.monotonic() < deadline:
        got = 0
        for p in out:
            result = consumer.fetch(topic, p, offsets[p], max_wait_ms=50)
            for batch in result.batches:
                out[p].extend(batch.values)
                got += len(batch)
            offsets[p] = result.next_offset
        if got:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 5:
            break
    # and nothing more than expected arrives afterwards
    for p in out:
        assert not consumer.fetch(topic, p, offsets[p], max_wait_ms=100).batches
    return out


def test_100k_messages_over_4_partitions_arrive_once_in_order(broker_cluster):
    cluster = broker_cluster(2)
    topic = "e2e"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 4)
    sent: dict[int, list[bytes]] = {p: [] for p in range(4)}
    with Producer(zk=cluster.zk_connect, linger_ms=2) as producer:
        for i in range(100_000):
            p = i % 4
            value = _value(i)
            sent[p].append(value)
            producer.send(topic, value, partition=p)
        producer.flush(timeout=60)
        assert producer.metrics()["messages_acked"] == 100_000
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        got = _consume_all(consumer, topic, 100_000)
    assert sum(len(v) for v in got.values()) == 100_000
    for p in range(4):
        assert got[p] == sent[p], f"partition {p} differs"


def test_lists_keys_and_gzip_round_trip(module_cluster, unique_name):
    cluster = module_cluster
    keyed = unique_name("keyed")
    with Producer(brokers=cluster.bootstrap, compression="gzip") as producer:
        values = [b"line %d" % i for i in range(5000)]
        producer.send(keyed, values, key=b"host-a").wait(30)
        producer.send(keyed, [b"other"], key=b"host-b").wait(30)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        found = {}
        for p in consumer.partitions(keyed):
            for m in consumer.messages(keyed, p, follow=True, timeout=1.0):
                found.setdefault(m.key, []).append(m.value)
                assert m.timestamp > 1_600_000_000_000
        batches = []
        for p in consumer.partitions(keyed):
            batches += consumer.fetch(keyed, p, consumer.offsets(keyed, p).start).batches
    assert found[b"host-a"] == values and found[b"host-b"] == [b"other"]
    assert all(b.codec == records.CODEC_GZIP for b in batches)


def test_every_codec_round_trips_through_a_broker_in_order(module_cluster, unique_name):
    cluster = module_cluster
    n = 20_000
    for name, codec in records.CODECS.items():
        topic = unique_name(f"codec-{name}")
        sent = [_value(i) + b" GET /index.html 200" for i in range(n)]
        with Producer(brokers=cluster.bootstrap, compression=name, linger_ms=5) as producer:
            for start in range(0, n, 700):
                producer.send(topic, sent[start : start + 700], partition=0)
            producer.flush(timeout=60)
            assert producer.metrics()["messages_acked"] == n
        with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
            got = _consume_all(consumer, topic, n)
            batches = consumer.fetch(topic, 0, 0).batches
            stored = consumer.offsets(topic, 0).end
        assert got[0] == sent, f"{name}: messages differ or are out of order"
        assert batches and all(b.codec == codec for b in batches), name
        if name != "none":
            assert stored < sum(map(len, sent)) / 3, f"{name}: {stored} bytes stored"


def test_broker_refuses_a_batch_with_an_unknown_codec_and_keeps_serving(module_cluster, unique_name):
    cluster = module_cluster
    codecs = unique_name("codecs")
    good = records.encode_batch([b"a", b"b"], None, 1)
    body = bytearray(good[records.CRC_START :])
    body[0] = 5  # codec id 5: no such codec
    bad = good[:5] + struct.pack(">I", zlib.crc32(body)) + bytes(body)
    with Producer(brokers=cluster.bootstrap, retries=0) as producer:
        producer.send(codecs, b"first", partition=0).wait(30)
        with pytest.raises(CorruptBatchError, match="unknown compression codec 5"):
            producer.send_raw(codecs, 0, bad).wait(30)
        producer.send(codecs, b"after", partition=0).wait(30)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        assert _consume_all(consumer, codecs, 2)[0] == [b"first", b"after"]


def test_broker_restart_between_produce_and_consume_loses_nothing(broker_cluster):
    cluster = broker_cluster(1)
    with Producer(zk=cluster.zk_connect) as producer:
        for i in range(200):
            producer.send("restart", [b"%d-%d" % (i, j) for j in range(50)], partition=i % 4)
        producer.flush(60)
    code = cluster.brokers[0].stop()
    assert code == 0, cluster.logs()
    cluster.brokers[0].start()
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        got = _consume_all(consumer, "restart", 200 * 50)
    assert sorted(v for vals in got.values() for v in vals) == sorted(
        b"%d-%d" % (i, j) for i in range(200) for j in range(50)
    )
    for p, vals in got.items():
        firsts = [int(v.split(b"-")[0]) for v in vals]
        assert firsts == sorted(firsts), f"partition {p} out of order"


def test_kill_9_while_producing_keeps_every_acknowledged_message(broker_cluster):
    cluster = broker_cluster(1, log={"flush_messages": 1})
    broker = cluster.brokers[0]
    acked: list[bytes] = []
    stop = threading.Event()

    def produce():
        with Producer(brokers=cluster.bootstrap, linger_ms=1, delivery_timeout=3) as producer:
            i = 0
            while not stop.is_set() and i < 200_000:
                batch = [b"k9-%06d-%d" % (i, j) for j in range(20)]
                try:
                    producer.send("crash", batch, partition=0).wait(5)
                except Exception:
                    break
                acked.extend(batch)
                i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 20
    while len(acked) < 4000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    stop.set()
    thread.join(30)
    assert len(acked) >= 4000, "producer made too little progress before the kill"
    # Simulate a torn write on top: the kill may or may not have left one.
    segment = max((broker.log_dir / "crash-0").glob("*.log"))
    with segment.open("ab") as f:
        f.write(b"\x00\x00\x10\x00\x01torn-tail")
    broker.start()
    assert "truncat" in broker.log_text().lower() or "cut" in broker.log_text().lower()
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        values = [m.value for m in consumer.messages("crash", 0, follow=True, timeout=1.0)]
    assert values[: len(acked)] == acked, "an acknowledged message is missing or out of order"
    assert len(values) - len(acked) <= 20 * 2, "more than the in-flight batch appeared after the kill"


def test_flipped_byte_is_never_delivered(broker_cluster):
    """A corrupt batch in the middle of a segment: the fetch reports it, nobody gets it."""
    cluster = broker_cluster(1)
    broker = cluster.brokers[0]
    with Producer(brokers=cluster.bootstrap) as producer:
        for i in range(30):
            producer.send("flip", [b"flip-%d-%d" % (i, j) for j in range(100)], partition=0).wait(10)
    broker.stop()
    segment = max((broker.log_dir / "flip-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    middle_batch_offsets = [pos for pos, _ in records.iter_raw_batches(data)]
    victim = middle_batch_offsets[len(middle_batch_offsets) // 2]
    data[victim + 100] ^= 0x55
    segment.write_bytes(bytes(data))
    broker.start()  # clean shutdown marker: no recovery, so the fetch must catch it
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        with pytest.raises(CorruptBatchError) as info:
            list(consumer.messages("flip", 0))
        assert str(victim) in str(info.value)
        # Everything before the corrupt batch is still readable and intact.
        result = consumer.fetch("flip", 0, 0, max_bytes=victim)
        assert sum(len(b) for b in result.batches) == 100 * (len(middle_batch_offsets) // 2)
    # Which mechanism caught it, for the record:
    print("caught by: fetch-time CRC check (clean restart skips tail recovery)")


def test_retention_deletes_old_segments_and_their_offsets(broker_cluster):
    cluster = broker_cluster(
        1, broker={"retention_check_ms": 200}, log={"segment_bytes": 4096, "retention_bytes": 16384}
    )
    with Producer(brokers=cluster.bootstrap) as producer:
        for _i in range(100):
            producer.send("ret", [b"x" * 100 for _ in range(10)], partition=0).wait(10)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        deadline = time.monotonic() + 15
        start, end = consumer.offsets("ret", 0)
        while (start == 0 or end - start > 16384) and time.monotonic() < deadline:
            time.sleep(0.1)
            start, end = consumer.offsets("ret", 0)
        assert start > 0, "retention deleted nothing"
        assert end - start <= 16384, "retention left more than retention_bytes"
        with pytest.raises(OffsetOutOfRangeError) as info:
            consumer.fetch("ret", 0, 0)
        assert info.value.start == start
        assert str(start) in str(info.value)
        remaining = list(consumer.messages("ret", 0))
        assert remaining and len(remaining) % 10 == 0


def test_long_poll_is_answered_by_a_produce(broker_cluster):
    """A fetch at the end waits for data and is answered by the produce, not by its timer.

    Behaviour only: how many milliseconds the answer takes is a benchmark's figure.
    The fetch's wait (60 s) is far longer than the test lets it run, so an answer that
    holds the new message and comes before that wait ends was woken by the produce.
    """
    max_wait_s = 60.0
    cluster = broker_cluster(1, log={"flush_messages": 1})
    with (
        Producer(brokers=cluster.bootstrap, linger_ms=0) as producer,
        SimpleConsumer(brokers=cluster.bootstrap) as consumer,
    ):
        producer.send("poll", b"first", partition=0).wait(10)
        end = consumer.offsets("poll", 0).end
        result: dict = {}
        waiting = threading.Event()

        def wait_fetch():
            result["t0"] = time.monotonic()
            waiting.set()
            result["fetch"] = consumer.fetch("poll", 0, end, max_wait_ms=int(max_wait_s * 1000))
            result["returned"] = time.monotonic()

        thread = threading.Thread(target=wait_fetch, daemon=True)
        thread.start()
        assert waiting.wait(10)
        time.sleep(0.5)  # let the fetch reach the broker and park there
        sent_at = time.monotonic()
        producer.send("poll", b"second", partition=0).wait(10)
        thread.join(max_wait_s + 15)
        assert "returned" in result, "the fetch never returned"
        assert result["fetch"].batches[0].values == [b"second"]
        assert result["returned"] >= sent_at, "the fetch answered before the message existed"
        assert result["returned"] - result["t0"] < max_wait_s, "answered by its timer, not by the produce"


def test_fetch_at_end_without_wait_returns_empty_immediately(module_cluster, unique_name):
    cluster = module_cluster
    empty = unique_name("empty")
    with Producer(brokers=cluster.bootstrap) as producer, SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        producer.send(empty, b"x", partition=0).wait(10)
        # acknowledged is not yet visible: wait for the fsync that makes it so, or the
        # fetch below would (rightly) return it
        wait_until(lambda: consumer.offsets(empty, 0).end > 0, 10, "the message to become visible")
        end = consumer.offsets(empty, 0).end
        # Nothing is produced until this returns: a broker that waited for data would
        # answer only at the client's request timeout, with an error.
        result = consumer.fetch(empty, 0, end)
        assert result.batches == [] and result.next_offset == end


def test_offsets_for_time(module_cluster, unique_name):
    cluster = module_cluster
    times = unique_name("times")
    with Producer(brokers=cluster.bootstrap) as producer, SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        for i in range(10):
            producer.send(times, [b"t%d" % i], partition=0, timestamp=1_000_000 + i * 1000).wait(10)
        # acknowledged is not yet visible: wait for the fsync that shows all ten
        wait_until(lambda: len(list(consumer.messages(times, 0))) == 10, 10, "the ten messages to become visible")
        offset = consumer.offset_for_time(times, 0, 1_000_000 + 5 * 1000)
        first = next(iter(consumer.messages(times, 0, start=offset)))
        assert first.value == b"t5"
        assert consumer.offset_for_time(times, 0, 0) == 0


def test_unacknowledged_fetch_timeout_is_reported(broker_cluster):
    cluster = broker_cluster(1)
    broker = cluster.brokers[0]
    with SimpleConsumer(brokers=cluster.bootstrap, request_timeout=1.0, metadata_retries=0) as consumer:
        with Producer(brokers=cluster.bootstrap) as producer:
            producer.send("hang", b"x", partition=0).wait(10)
        broker.pause()
        try:
            with pytest.raises(RequestTimedOutError):
                consumer.fetch("hang", 0, 0)
        finally:
            broker.resume()


def test_a_full_buffer_drains_in_requests_under_the_brokers_limit(broker_cluster):
    """A backlog far larger than max_request_bytes is split, never refused as a whole."""
    cluster = broker_cluster(1, broker={"max_request_bytes": 1 << 20})
    values = [b"%06d" % i + b"y" * 200 for i in range(50_000)]  # ~10 MB queued at once
    with Producer(
        brokers=cluster.bootstrap, max_request_bytes=512 * 1024, linger_ms=50, batch_bytes=64 * 1024
    ) as producer:
        for i in range(0, len(values), 1000):
            producer.send("backlog", values[i : i + 1000], partition=0)
        producer.flush(60)
        assert producer.metrics()["messages_acked"] == len(values)
        assert producer.metrics()["requests"] > 20
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        got = [m.value for m in consumer.messages("backlog", 0, follow=True, timeout=1.0, limit=len(values))]
    assert got == values


def test_a_producer_queues_through_an_outage_of_every_broker(broker_cluster):
    """Once a topic is known, send() needs no broker: a retry drops the cached leaders,
    and a send() after that must queue (not raise) while every broker is down."""
    cluster = broker_cluster(1)
    broker = cluster.brokers[0]
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic("outage", 2)
    with Producer(zk=cluster.zk_connect, acks=1, delivery_timeout=60, retry_backoff_ms=50) as producer:
        producer.send("outage", [b"before"], partition=0).wait(30)
        broker.stop()
        futures = [producer.send("outage", [b"down-%d" % i]) for i in range(50)]
        wait_until(lambda: producer.metrics()["retries"] > 0, 10, what="the sender retrying")
        futures += [producer.send("outage", [b"after-retry-%d" % i]) for i in range(50)]
        broker.start()
        for future in futures:
            future.wait(60)
    with SimpleConsumer(zk=cluster.zk_connect) as consumer:
        values = [m.value for p in (0, 1) for m in consumer.messages("outage", p, follow=True, timeout=1.0)]
    assert sorted(values) == sorted(
        [b"before"] + [b"down-%d" % i for i in range(50)] + [b"after-retry-%d" % i for i in range(50)]
    )
