"""Every kind of bad input gets its error while another client keeps working.

The tests share the module's broker (``module_cluster``), each with its own topics; the
one that reads the broker's log for tracebacks starts a broker of its own, so that the
log holds only what its own bad input caused."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import msgpack
import pytest

from broker.client import Producer, SimpleConsumer
from broker.common.errors import (
    CorruptBatchError,
    FrameTooLargeError,
    InvalidOffsetError,
    InvalidRequestError,
    InvalidTopicConfigError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ProtocolError,
    StaleEpochError,
    UnknownTopicOrPartitionError,
    UnsupportedApiError,
)
from broker.wire import protocol, records
from broker.wire.fetch import parse_fetch_answer
from broker.wire.produce import parse_produce_answer
from tests.support.brokers import Cluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


class RawClient:
    """A socket speaking raw frames, to send what a well-behaved client never would."""

    def __init__(self, address: str):
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = protocol.FrameDecoder()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self) -> dict | None:
        """The next response header, or None if the broker closed the connection."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame.header
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.feed(data)

    def closed_by_broker(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def _frame(header: dict, payload: bytes = b"") -> bytes:
    return protocol.encode_frame(header, len(payload)) + payload


BROKER = {"max_request_bytes": 1 << 20}


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    return {"broker": BROKER}


class Busy(NamedTuple):
    cluster: Cluster
    stats: dict[str, Any]
    good: str
    """The topic the well-behaved client writes and reads."""


@contextmanager
def _kept_busy(cluster: Cluster, good: str) -> Iterator[Busy]:
    """A second client keeps producing to and consuming ``good`` throughout."""
    stop = threading.Event()
    stats = {"sent": 0, "read": 0, "errors": []}

    def background():
        try:
            with (
                Producer(brokers=cluster.bootstrap, linger_ms=1) as producer,
                SimpleConsumer(brokers=cluster.bootstrap) as consumer,
            ):
                offset = 0
                while not stop.is_set() and stats["sent"] < 2_000_000:
                    producer.send(good, [b"ok-%d" % (stats["sent"] + i) for i in range(10)], partition=0).wait(10)
                    stats["sent"] += 10
                    result = consumer.fetch(good, 0, offset, max_wait_ms=100)
                    stats["read"] += sum(len(b) for b in result.batches)
                    offset = result.next_offset
        except Exception as exc:  # recorded and asserted on by the test
            stats["errors"].append(repr(exc))

    thread = threading.Thread(target=background, daemon=True)
    thread.start()
    # the topic exists (auto-created), is being written and shows its first batch before
    # any test begins (an acknowledged batch is visible only once flushed: a fetch inside
    # it until then is answered empty, not refused as off a batch boundary)
    wait_until(lambda: stats["read"] > 0 or stats["errors"], timeout=30, what="the first batch read back")
    yield Busy(cluster, stats, good)
    before = stats["sent"]
    time.sleep(0.5)
    stop.set()
    thread.join(20)
    assert not stats["errors"], stats["errors"]
    assert stats["sent"] > before, "the well-behaved client stalled"
    assert cluster.brokers[0].is_running(), cluster.logs()


@pytest.fixture
def busy_cluster(module_cluster: Cluster, unique_name: Callable[[str], str]) -> Iterator[Busy]:
    """The module's broker plus a second client that keeps producing and consuming
    throughout, on a topic of this test."""
    with _kept_busy(module_cluster, unique_name("good")) as busy:
        yield busy


@pytest.fixture
def busy_own_broker(broker_cluster: Any, unique_name: Callable[[str], str]) -> Iterator[Busy]:
    """As ``busy_cluster``, on a broker of this test alone (its log is this test's)."""
    with _kept_busy(broker_cluster(1, broker=BROKER), unique_name("good")) as busy:
        yield busy


def _answered(client: RawClient, error: type, corr=1) -> dict:
    header = client.response()
    assert header is not None, "connection closed without an error response"
    assert header["id"] == corr
    assert header["err"] == error.code, header
    assert header["msg"]
    return header


def test_unknown_api_and_version(busy_cluster):
    cluster = busy_cluster.cluster
    client = RawClient(cluster.bootstrap[0])
    client.send(_frame({"api": 99, "v": 1, "id": 1}))
    _answered(client, UnsupportedApiError)
    client.send(_frame({"api": protocol.FETCH, "v": 42, "id": 2}))
    _answered(client, UnsupportedApiError, corr=2)
    client.close()


def test_frame_over_max_request_bytes(busy_cluster):
    cluster = busy_cluster.cluster
    client = RawClient(cluster.bootstrap[0])
    client.send(struct.pack(">II", 5 << 20, 10))
    header = client.response()
    assert header is not None and header["err"] == FrameTooLargeError.code
    assert "max.request.bytes" in header["msg"]
    assert client.closed_by_broker()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x08\x00\x00\x00\x04\xc1\xc1\xc1\xc1",  # invalid msgpack header
        b"\x00\x00\x00\x06\x00\x00\x00\x02\x93\x01",  # header is not a map
        b"\x00\x00\x00\x04\x00\x00\x00\x09",  # header longer than frame
    ],
)
def test_undecodable_frames_close_the_connection_with_an_error(busy_cluster, garbage):
    cluster = busy_cluster.cluster
    client = RawClient(cluster.bootstrap[0])
    client.send(garbage)
    header = client.response()
    assert header is not None and header["err"] == ProtocolError.code
    assert client.closed_by_broker()


def test_garbage_bytes_and_mid_frame_disconnect(busy_cluster):
    cluster = busy_cluster.cluster
    client = RawClient(cluster.bootstrap[0])
    client.send(bytes(range(256)) * 4)
    header = client.response()
    assert header is None or header["err"] in (ProtocolError.code, FrameTooLargeError.code)
    client.close()
    half = RawClient(cluster.bootstrap[0])
    frame = _frame({"api": 0, "v": 1, "id": 1, "acks": 1, "parts": []}, b"x" * 1000)
    half.send(frame[:500])
    half.close()  # disconnect mid-frame


def test_missing_fields_and_bad_types(busy_cluster):
    cluster = busy_cluster.cluster
    client = RawClient(cluster.bootstrap[0])
    client.send(_frame({"api": protocol.FETCH, "v": 1, "id": 1, "parts": "nope"}))
    _answered(client, InvalidRequestError)
    client.send(_frame({"api": protocol.PRODUCE, "v": 1, "id": 2, "acks": 7, "parts": []}))
    _answered(client, InvalidRequestError, corr=2)
    client.close()


def test_fetch_waits_that_are_not_numbers_are_invalid_requests(busy_own_broker):
    cluster, _, good = busy_own_broker
    client = RawClient(cluster.bootstrap[0])
    bad = [
        ("max_wait_ms", {"ms": 5}),
        ("max_wait_ms", [5]),
        ("min_bytes", {}),
        ("min_bytes", [1, 2]),
        ("max_wait_ms", "5"),
    ]
    for corr, (field, value) in enumerate(bad, 1):
        client.send(_frame({"api": protocol.FETCH, "v": 1, "id": corr, field: value, "parts": [[good, 0, 0, 1024]]}))
        assert field in _answered(client, InvalidRequestError, corr=corr)["msg"]
    client.close()
    assert "Traceback" not in cluster.logs()


def test_crc_mismatch_is_rejected_and_nothing_is_appended(busy_cluster):
    cluster, _, good = busy_cluster
    batch = bytearray(records.encode_batch([b"a", b"b"], None, 1))
    batch[-1] ^= 0xFF
    client = RawClient(cluster.bootstrap[0])
    client.send(_frame({"api": 0, "v": 1, "id": 1, "acks": 1, "parts": [[good, 1, len(batch)]]}, bytes(batch)))
    header = client.response()
    assert header["err"] == 0
    (result,) = parse_produce_answer(header)
    assert result.error == CorruptBatchError.code and "CRC" in result.message
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        assert consumer.offsets(good, 1).end == 0


def test_unknown_topic_partition_and_invalid_names(busy_cluster, unique_name):
    cluster, _, good = busy_cluster
    batch = records.encode_batch([b"a"], None, 1)
    client = RawClient(cluster.bootstrap[0])
    client.send(
        _frame(
            {
                "api": 0,
                "v": 1,
                "id": 1,
                "acks": 1,
                "parts": [
                    [unique_name("no-such-topic"), 0, len(batch)],
                    [good, 99, len(batch)],
                    ["../../etc", 0, len(batch)],
                ],
            },
            batch * 3,
        )
    )
    header = client.response()
    results = parse_produce_answer(header)
    codes = [r.error for r in results]
    assert codes == [UnknownTopicOrPartitionError.code, UnknownTopicOrPartitionError.code, InvalidTopicError.code]
    assert "partitions 0-3" in results[1].message
    client.send(_frame({"api": protocol.OFFSETS, "v": 1, "id": 2, "topic": "..", "partition": 0}))
    _answered(client, InvalidTopicError, corr=2)
    client.send(_frame({"api": protocol.CREATE_TOPIC, "v": 1, "id": 3, "topic": "a/b", "partitions": 1}))
    _answered(client, InvalidTopicError, corr=3)
    client.close()
    assert not list(cluster.brokers[0].log_dir.parent.glob("**/etc*"))


def test_offsets_out_of_range_and_off_boundary(busy_cluster):
    cluster, _, good = busy_cluster
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        start, end = consumer.offsets(good, 0)
        with pytest.raises(OffsetOutOfRangeError) as info:
            consumer.fetch(good, 0, end + 10_000)
        assert f"[{start}, " in str(info.value)
        assert info.value.end is not None and info.value.end >= end
        with pytest.raises(InvalidOffsetError):
            consumer.fetch(good, 0, 3)


def test_acks_zero_producer_with_errors_is_disconnected(busy_cluster):
    cluster = busy_cluster.cluster
    batch = records.encode_batch([b"a"], None, 1)
    client = RawClient(cluster.bootstrap[0])
    client.send(_frame({"api": 0, "v": 1, "id": 1, "acks": 0, "parts": [["nope!", 0, len(batch)]]}, batch))
    assert client.closed_by_broker()


def test_msgpack_payload_types_are_checked(busy_cluster):
    cluster, _, good = busy_cluster
    client = RawClient(cluster.bootstrap[0])
    head = msgpack.packb({"api": 1, "v": 1, "id": 5, "parts": [[good, "zero", 0, 100]]})
    client.send(struct.pack(">II", 4 + len(head), len(head)) + head)
    _answered(client, InvalidRequestError, corr=5)
    client.close()


def test_bad_replication_requests(busy_cluster, unique_name):
    cluster, _, good = busy_cluster
    client = RawClient(cluster.bootstrap[0])
    fetch = {"api": protocol.FETCH, "v": 1, "max_wait_ms": 0}
    # A replica fetch names the leader epoch in every part.
    client.send(_frame({**fetch, "id": 1, "replica": 7, "parts": [[good, 0, 0, 1024]]}))
    assert "leader_epoch" in _answered(client, InvalidRequestError)["msg"]
    client.send(_frame({**fetch, "id": 2, "replica": "seven", "parts": []}))
    _answered(client, InvalidRequestError, corr=2)
    client.send(_frame({**fetch, "id": 3, "replica": 7, "parts": [[good, 0, 0, 1024, 99]]}))
    header = client.response()
    (stale,) = parse_fetch_answer(header, replica=True)
    assert header["err"] == 0 and stale.error == StaleEpochError.code
    assert "epoch 99" in stale.message
    # Topics cannot have more replicas than live brokers, nor a min ISR above that.
    wide = unique_name("wide")
    create = {"api": protocol.CREATE_TOPIC, "v": 1, "topic": wide, "partitions": 1}
    client.send(_frame({**create, "id": 4, "replication_factor": 3}))
    assert "needs 3 live brokers, only 1" in _answered(client, InvalidRequestError, corr=4)["msg"]
    client.send(_frame({**create, "id": 5, "replication_factor": 1, "min_insync_replicas": 2}))
    # a per-topic setting out of range: InvalidTopicConfigError, an InvalidRequestError
    # that names the key
    assert "min_insync_replicas" in _answered(client, InvalidTopicConfigError, corr=5)["msg"]
    client.send(_frame({**create, "id": 6, "replication_factor": "three"}))
    _answered(client, InvalidRequestError, corr=6)
    # acks=-1 (all) on a topic with one replica: the leader alone is the ISR.
    batch = records.encode_batch([b"all"], None, 1)
    client.send(_frame({"api": 0, "v": 1, "id": 7, "acks": -1, "parts": [[good, 2, len(batch)]]}, batch))
    header = client.response()
    assert header["id"] == 7 and parse_produce_answer(header)[0].error == 0
    client.close()
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        assert wide not in consumer.topics()  # nothing half-created
