"""Kafka clients nobody here wrote (kafka-python; confluent-kafka, i.e. librdkafka)
against real brokers with a Kafka listener and a real ZooKeeper (docs/kafka.md).

The tests that use only their own topics share the module's broker (``module_kafka_cluster``);
those that need several brokers, restart one or run a group keep their own."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from broker.client import Admin, Producer, SimpleConsumer
from tests.support.brokers import KAFKA_LISTENER, KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The broker the module's tests share speaks Kafka too, as ``kafka_cluster(1)``'s."""
    return {"kafka": KAFKA_LISTENER}


N = 300


def rd_consume(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0) -> list[Any]:
    consumer = RdConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, "api.version.request": True}
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # earliest
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
        return out
    finally:
        consumer.close()


def test_librdkafka_produce_and_consume_keys_headers_order(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    rd = unique_name("rd")
    cluster.create_topic(rd, 3)
    producer = RdProducer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none"}
    )
    errors: list[Any] = []
    for i in range(N):
        producer.produce(
            rd,
            value=f"v{i}".encode(),
            key=f"k{i % 7}".encode(),
            partition=i % 3,
            headers=[("h", f"{i}".encode()), ("n", None)],
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, msg: err and errors.append(err),
        )
    assert producer.flush(30) == 0
    assert not errors
    got = rd_consume(cluster.bootstrap, rd, 3, N)
    assert len(got) == N
    by_partition: dict[int, list[int]] = {}
    for msg in got:
        i = int(msg.value()[1:])
        assert msg.key() == f"k{i % 7}".encode()
        assert msg.headers() == [("h", f"{i}".encode()), ("n", None)]
        assert msg.timestamp()[1] == 1_700_000_000_000 + i
        assert msg.partition() == i % 3
        by_partition.setdefault(msg.partition(), []).append(i)
    for p, seq in by_partition.items():
        assert seq == sorted(seq), f"partition {p} out of order"
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(len(seq)))  # message offsets: one per record, no gap


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_compressed_batches_read_by_native_consumer(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str], compression: str
) -> None:
    cluster = module_kafka_cluster
    zipped = unique_name("zipped")
    cluster.create_topic(zipped, 1)
    producer = RdProducer(
        {"bootstrap.servers": cluster.bootstrap, "acks": 1, "compression.type": compression, "linger.ms": 20}
    )
    for i in range(N):
        producer.produce(zipped, value=b"x" * 100 + str(i).encode(), key=b"key", headers={"i": str(i).encode()})
    assert producer.flush(30) == 0
    consumer = SimpleConsumer(brokers=cluster.native)
    try:
        got = list(consumer.messages(zipped, 0, follow=True, limit=N, timeout=10))
    finally:
        consumer.close()
    assert [m.value for m in got] == [b"x" * 100 + str(i).encode() for i in range(N)]
    assert all(m.key == b"key" for m in got)
    native_batches = consumer_batches(cluster, zipped)
    headers = [h for b in native_batches for h in b.headers]
    assert headers == [[[b"i", str(i).encode()]] for i in range(N)]


def consumer_batches(cluster: KafkaCluster, topic: str) -> list[Any]:
    consumer = SimpleConsumer(brokers=cluster.native)
    try:
        out: list[Any] = []
        offset = 0
        while True:
            result = consumer.fetch(topic, 0, offset)
            out.extend(result.batches)
            if result.next_offset >= result.visible_end:
                return out
            offset = result.next_offset
    finally:
        consumer.close()


def test_kafka_python_reads_what_the_native_producer_wrote_and_vice_versa(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    mixed = unique_name("mixed")
    cluster.create_topic(mixed, 2)
    native = Producer(brokers=cluster.native, acks="all")
    for i in range(N):
        native.send(mixed, [f"native-{i}".encode()], key=b"agent", partition=i % 2)
    native.flush(30)
    native.close()

    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5, enable_idempotence=False)
    for i in range(N):
        kp.send(mixed, value=f"kafka-{i}".encode(), key=b"kp", partition=i % 2, headers=[("src", b"kafka-python")])
    kp.flush(30)
    kp.close()

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
        auto_offset_reset="earliest",
    )
    consumer.assign([KpTopicPartition(mixed, 0), KpTopicPartition(mixed, 1)])
    got = [m for _, m in zip(range(2 * N), consumer, strict=False)]
    consumer.close()
    values = [m.value for m in got]
    assert sorted(values) == sorted(
        [f"native-{i}".encode() for i in range(N)] + [f"kafka-{i}".encode() for i in range(N)]
    )
    for p in (0, 1):
        mine = [m for m in got if m.partition == p]
        native_part = [int(m.value.split(b"-")[1]) for m in mine if m.value.startswith(b"native")]
        kafka_part = [int(m.value.split(b"-")[1]) for m in mine if m.value.startswith(b"kafka")]
        assert native_part == sorted(native_part) and kafka_part == sorted(kafka_part)
        assert [m.offset for m in mine] == list(range(N))  # native and Kafka batches alike
    assert all(m.key == b"agent" for m in got if m.value.startswith(b"native"))
    assert all(list(m.headers) == [("src", b"kafka-python")] for m in got if m.value.startswith(b"kafka"))

    reader = SimpleConsumer(brokers=cluster.native)
    try:
        native_got = [m for p in (0, 1) for m in reader.messages(mixed, p)]
    finally:
        reader.close()
    assert sorted(m.value for m in native_got) == sorted(values)


def test_list_offsets_by_time_and_resume_mid_batch(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    timed = unique_name("timed")
    cluster.create_topic(timed, 1)
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 50})
    base = 1_700_000_000_000
    for i in range(100):
        producer.produce(timed, value=str(i).encode(), partition=0, timestamp=base + i * 10)
    assert producer.flush(30) == 0
    consumer = RdConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 20
        offset = -1
        while offset < 0 and time.monotonic() < deadline:  # visible once flushed
            found = consumer.offsets_for_times([TopicPartition(timed, 0, base + 455)], 10)
            offset = found[0].offset
            if offset < 0:
                time.sleep(0.05)
        assert offset == 46  # the message offset of the first record stamped at or after it
        low, high = consumer.get_watermark_offsets(TopicPartition(timed, 0), 10)
        assert (low, high) == (0, 100)
        consumer.assign([TopicPartition(timed, 0, offset)])
        first = None
        deadline = time.monotonic() + 20
        while first is None and time.monotonic() < deadline:
            first = consumer.poll(0.5)
        assert first is not None and first.error() is None
        assert first.value() == b"46"  # the first message stamped at or after base + 455
        rest = []
        while len(rest) < 53 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                rest.append(int(msg.value()))
        assert rest == list(range(47, 100))
    finally:
        consumer.close()


def _frame(api: int, version: int, corr: int, body: bytes = b"", flexible: bool = False) -> bytes:
    head = struct.pack(">hhi", api, version, corr) + struct.pack(">h", 1) + b"t"
    if flexible:
        head += b"\x00"
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv(sock, 4))[0]
    return _recv(sock, size)


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionError:
        return True


def test_unsupported_apis_and_malformed_frames(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    safe = unique_name("safe")
    cluster.create_topic(safe, 1)
    host, port = cluster.brokers[0].kafka_address().rsplit(":", 1)
    addr = (host, int(port))
    # DescribeAcls (29) v1: known to Kafka, not served here: UNSUPPORTED_VERSION (35)
    with socket.create_connection(addr, timeout=5) as sock:
        any_acl = struct.pack(">bhb", 1, -1, 1) + struct.pack(">h", -1) * 2 + struct.pack(">bb", 1, 1)
        sock.sendall(_frame(29, 1, 7, any_acl))
        answer = _read_frame(sock)
        assert struct.unpack_from(">iih", answer) == (7, 0, 35)
        # ApiVersions at a version from the future: v0 answer with error 35, then retry
        sock.sendall(_frame(18, 99, 8))
        answer = _read_frame(sock)
        assert struct.unpack_from(">ih", answer) == (8, 35)
        sock.sendall(_frame(18, 0, 9))
        answer = _read_frame(sock)
        assert struct.unpack_from(">ih", answer) == (9, 0)
    # an api key no Kafka has: closed
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(_frame(4242, 0, 1))
        assert _closed(sock)
    # oversized and negative frame sizes: closed
    for size in (2**31 - 1, -5):
        with socket.create_connection(addr, timeout=5) as sock:
            sock.sendall(struct.pack(">i", size) + b"\0" * 16)
            assert _closed(sock)
    # truncated body (Metadata v1 claiming one topic and ending): closed
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(_frame(3, 1, 3, struct.pack(">i", 1)))
        assert _closed(sock)
    # a produce whose record batch fails its CRC: CORRUPT_MESSAGE for the partition
    good = _record_batch_bytes()
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    body = (
        struct.pack(">hhi", -1, 1, 5000)
        + struct.pack(">i", 1)
        + struct.pack(">h", len(safe))
        + safe.encode()
        + struct.pack(">i", 1)
        + struct.pack(">i", 0)
        + struct.pack(">i", len(bad))
        + bytes(bad)
    )
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(_frame(0, 3, 11, body))
        answer = _read_frame(sock)
        corr, ntopics = struct.unpack_from(">ii", answer)
        assert corr == 11 and ntopics == 1
        assert struct.pack(">ih", 0, 2) in answer  # partition 0, CORRUPT_MESSAGE
    # the native protocol and Kafka clients still work
    native = Producer(brokers=cluster.native)
    native.send(safe, [b"still here"], partition=0)
    native.flush(10)
    native.close()
    got = rd_consume(cluster.bootstrap, safe, 1, 1)
    assert [m.value() for m in got] == [b"still here"]


def _record_batch_bytes() -> bytes:
    from broker.server.kafka.record_batch import encode_record_batch

    return bytes(encode_record_batch(0, 0, 1_700_000_000_000, None, None, [b"payload"]))


def rd_group_consumer(bootstrap: str, group: str, topic: str, **extra: Any) -> Any:
    consumer = RdConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )
    consumer.subscribe([topic])
    return consumer


def test_librdkafka_group_shares_partitions_and_commits_are_honoured(kafka_cluster: Any, zk_client: Any) -> None:
    cluster = kafka_cluster(2)
    cluster.create_topic("grp", 4)
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(N):
        producer.produce("grp", value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0

    consumers = [rd_group_consumer(cluster.bootstrap, "g1", "grp") for _ in range(2)]
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    deadline = time.monotonic() + 60
    try:
        while sum(len(s) for s in seen.values()) < N and time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    seen[i].add(int(msg.value()))
        assert seen[0] | seen[1] == set(range(N))
        assert seen[0] and seen[1], "both members got partitions"
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()

    # the commits are where a Kafka client of the group resumes: nothing is left
    for i in range(N, N + 8):
        producer.produce("grp", value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer(
        "grp",
        bootstrap_servers=cluster.bootstrap,
        group_id="g1",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
    )
    later = sorted(int(m.value) for m in consumer)
    consumer.close()
    assert later == list(range(N, N + 8))
    # the Kafka commits are message offsets (N / 4 records per partition), and where a
    # native consumer of the group would resume is (batch byte offset, skip)
    import json

    for p in range(4):
        kafka = json.loads(zk_client.get(f"/consumers/g1/kafka_offsets/grp/{p}")[0])
        assert (kafka["offset"], kafka["unit"]) == (N // 4, "message")
        path = f"/consumers/g1/offsets/grp/{p}"
        if zk_client.exists(path):
            value = json.loads(zk_client.get(path)[0])
            assert value["offset"] >= 0 and value["skip"] >= 0


def test_librdkafka_with_the_kip_848_consumer_protocol(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """librdkafka's ``group.protocol=consumer``: two members share the partitions
    (ConsumerGroupHeartbeat, server-side assignment), their commits resume a third."""
    cluster = module_kafka_cluster
    topic, group = unique_name("rd848"), unique_name("rd848g")
    cluster.create_topic(topic, 4)
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(N):
        producer.produce(topic, value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0

    def member() -> Any:
        consumer = RdConsumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        return consumer

    consumers = [member(), member()]
    seen: set[int] = set()
    shared = False
    deadline = time.monotonic() + 20
    try:
        while (len(seen) < N or not shared) and time.monotonic() < deadline:
            for consumer in consumers:
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    seen.add(int(msg.value()))
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            shared = all(owned) and not (owned[0] & owned[1]) and owned[0] | owned[1] == {0, 1, 2, 3}
        assert seen == set(range(N))
        assert shared, f"the two members' partitions: {owned}"
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()

    for i in range(N, N + 8):
        producer.produce(topic, value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0
    third = member()
    later: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while len(later) < 8 and time.monotonic() < deadline:
            msg = third.poll(0.2)
            if msg is not None and msg.error() is None:
                later.append(int(msg.value()))
    finally:
        third.close()
    assert sorted(later) == list(range(N, N + 8))


def test_committed_position_survives_a_broker_restart(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1)
    cluster.create_topic("durable", 1)
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for i in range(40):
        producer.produce("durable", value=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = rd_group_consumer(cluster.bootstrap, "keep", "durable")
    first: list[int] = []
    deadline = time.monotonic() + 30
    while len(first) < 15 and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is None:
            first.append(int(msg.value()))
            if len(first) == 15:  # mid-batch: the position is inside a logferry batch
                consumer.commit(message=msg, asynchronous=False)
    consumer.close()
    assert first == list(range(15))

    broker = cluster.brokers[0]
    before = broker.kafka_address()
    broker.restart()
    deadline = time.monotonic() + 30  # port 0: the restarted broker logs its new port
    while broker.kafka_address() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer = rd_group_consumer(broker.kafka_address(), "keep", "durable")
    rest: list[int] = []
    deadline = time.monotonic() + 30
    while len(rest) < 25 and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is None:
            rest.append(int(msg.value()))
    consumer.close()
    assert rest == list(range(15, 40))


def test_create_and_delete_topics_with_kafka_python_admin(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    cluster = module_kafka_cluster
    made = unique_name("made-by-kafka")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(made, num_partitions=3, replication_factor=1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(made, num_partitions=3, replication_factor=1)])
        native = Admin(brokers=cluster.native)
        try:
            assert len(native.describe_topic(made)) == 3
        finally:
            native.close()
        admin.delete_topics([made])
        deadline = time.monotonic() + 10
        while made in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert made not in admin.list_topics()
    finally:
        admin.close()


def test_leader_kill_under_librdkafka_acks_all_loses_no_acknowledged_message(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(3, default_replication_factor=3, min_insync_replicas=2)
    cluster.create_topic("failover", 1, rf=3)
    admin = Admin(brokers=cluster.native)
    try:
        leader = admin.describe_topic("failover")[0]
    finally:
        admin.close()
    acked: list[int] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value()))
        else:
            failed.append(err)

    producer = RdProducer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 200,
        }
    )
    for i in range(2000):
        producer.produce("failover", value=str(i).encode(), partition=0, on_delivery=delivered)
        if i == 1000:
            producer.flush(30)
            next(b for b in cluster.brokers if b.id == leader).kill()
        producer.poll(0)
    assert producer.flush(90) == 0
    assert len(acked) > 1000
    survivors = [b for b in cluster.brokers if b.id != leader]
    bootstrap = ",".join(b.kafka_address() for b in survivors)
    got = rd_consume(bootstrap, "failover", 1, len(set(acked)), timeout=60)
    values = {int(m.value()) for m in got}
    assert set(acked) <= values, f"lost {sorted(set(acked) - values)[:10]}"


def test_idempotent_kafka_producers_are_stored_as_idempotent_batches(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    idem = unique_name("idem")
    cluster.create_topic(idem, 1)
    rd = RdProducer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(N):
        rd.produce(idem, value=f"rd-{i}".encode(), partition=0)
    assert rd.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap)  # idempotence on by default
    for i in range(N):
        kp.send(idem, value=f"kp-{i}".encode(), partition=0)
    kp.flush(30)
    kp.close()
    reader = SimpleConsumer(brokers=cluster.native)
    try:
        got = list(reader.messages(idem, 0, follow=True, limit=2 * N, timeout=10))
        batches = consumer_batches(cluster, idem)
    finally:
        reader.close()
    assert [m.value for m in got] == ([f"rd-{i}".encode() for i in range(N)] + [f"kp-{i}".encode() for i in range(N)])
    assert all(b.producer_id >= 0 for b in batches)
    assert len({b.producer_id for b in batches}) == 2


def test_list_and_describe_groups_with_kafka_python_admin(kafka_cluster: Any) -> None:
    """ListGroups and DescribeGroups as an admin client sees them: the live group with
    its members and their assignments, and a group with only commits left as Empty."""
    from kafka.admin import KafkaAdminClient

    cluster = kafka_cluster(2)
    cluster.create_topic("described", 4)
    producer = RdProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(40):
        producer.produce("described", value=str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0
    consumers = [
        rd_group_consumer(cluster.bootstrap, "watched", "described", **{"client.id": f"member-{i}"}) for i in range(2)
    ]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while (len(seen) < 40 or any(not c.assignment() for c in consumers)) and time.monotonic() < deadline:
            for consumer in consumers:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    seen.add(int(msg.value()))
        assert len(seen) == 40 and all(c.assignment() for c in consumers)
        consumers[0].commit(asynchronous=False)

        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["watched"]["protocol_type"] == "consumer"
        assert listed["watched"]["group_state"] == "Stable"
        stable = [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])]
        assert "watched" in stable

        described = admin.describe_groups(["watched", "never-seen"])
        group = described["watched"]
        assert group["error"] is None
        assert group["group_state"] == "Stable"
        assert group["protocol_type"] == "consumer" and group["protocol_data"]
        members = group["members"]
        assert sorted(m["client_id"] for m in members) == ["member-0", "member-1"]
        assert all(m["client_host"] == "127.0.0.1" for m in members)
        partitions = sorted(p for m in members for p in _assigned(m["member_assignment"]))
        assert partitions == [0, 1, 2, 3]
        assert described["never-seen"]["group_state"] == "Dead"
        assert described["never-seen"]["members"] == []
    finally:
        for consumer in consumers:
            consumer.close()
    try:
        # every member left: the group is Empty, listed by its commits' coordinator
        deadline = time.monotonic() + 20
        state = ""
        while state != "Empty" and time.monotonic() < deadline:
            state = admin.describe_groups(["watched"])["watched"]["group_state"]
            time.sleep(0.2)
        assert state == "Empty"
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["watched"]["group_state"] == "Empty"
    finally:
        admin.close()


def _assigned(assignment: Any) -> list[int]:
    """The partitions of a decoded consumer-protocol assignment (kafka-python's form)."""
    data = assignment if isinstance(assignment, dict) else assignment.to_dict()
    return [p for topic in data["assigned_partitions"] for p in topic["partitions"]]
