"""Kafka transactions on the Kafka listener (docs/kafka.md, "Transactions"; issue 35),
with confluent-kafka's transactional producer (and aiokafka's and kafka-python's) and
read_committed / read_uncommitted consumers against real brokers and a real ZooKeeper.

Committed transactions are read by read_committed consumers, aborted ones are not
(read_uncommitted sees both): counted. ``send_offsets_to_transaction`` makes a group's
offsets visible on commit only. Two producers with one transactional.id: the older
is fenced. A transaction left open past its timeout is aborted by the coordinator.
The coordinator's state survives a kill -9 of its broker (3 brokers). A
read-process-write loop killed with -9 at random points leaves each input once."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer
from kazoo.client import KazooClient

from broker.client import Admin, SimpleConsumer
from broker.common.errors import ControlBatchRefusedError, InvalidPartitionsError, InvalidTopicError
from broker.coordination import transactions as store
from broker.coordination.transactions import state_path
from broker.server.kafka.txn_log import TOPIC, partition_for
from broker.server.kafka.txn_markers import marker_batch
from broker.server.kafka.txn_state import TxnMetadata, TxnState
from broker.wire import protocol
from broker.wire.produce import ProducePart, encode_produce_request, parse_produce_answer
from broker.wire.records import encode_batch
from tests.support.brokers import KAFKA_LISTENER, KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The broker the module's tests share speaks Kafka too, and forgets transactional
    ids idle for 3 s (7 days by default; its full scans then run every second)."""
    return {"kafka": KAFKA_LISTENER, "broker": {"transactional_id_expiration_ms": IDLE_ID_MS}}


IDLE_ID_MS = 3000
_readers = itertools.count()


def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    producer.init_transactions(20)
    return producer


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, expect: int, timeout: float = 20
) -> list[bytes]:
    """Every value of ``topic`` (``assign`` from the start), read with ``isolation``
    until ``expect`` values came and a further 0.5 s brought none, or ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{next(_readers)}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                if len(values) >= expect:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 0.5:
                        break
                continue
            quiet_since = None
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_commit_and_abort_read_committed_and_uncommitted(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("txn")
    cluster.create_topic(topic, 2)
    producer = txn_producer(cluster.bootstrap, unique_name("tid"))
    sent = {"committed": 0, "aborted": 0}
    for round_ in range(3):
        for outcome in ("committed", "aborted"):
            producer.begin_transaction()
            for i in range(50):
                producer.produce(topic, value=f"{outcome}-{round_}-{i}".encode(), partition=i % 2)
            if outcome == "committed":
                producer.commit_transaction(20)
            else:
                producer.flush(20)  # the data is in the log before the abort
                producer.abort_transaction(20)
            sent[outcome] += 50
    committed = read_all(cluster.bootstrap, topic, 2, "read_committed", sent["committed"])
    everything = read_all(cluster.bootstrap, topic, 2, "read_uncommitted", 300)
    print(f"sent {sent}; read_committed read {len(committed)}, read_uncommitted {len(everything)}")
    assert sorted(committed) == sorted(f"committed-{r}-{i}".encode() for r in range(3) for i in range(50))
    assert len(everything) == 300 and len(set(everything)) == 300


def test_open_transaction_holds_back_read_committed(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """Data after an open transaction's first batch waits for its end (the last stable
    offset), even another producer's committed data; a plain producer's too."""
    cluster = module_kafka_cluster
    topic = unique_name("lso")
    cluster.create_topic(topic, 1)
    open_one = txn_producer(cluster.bootstrap, unique_name("open"))
    open_one.begin_transaction()
    open_one.produce(topic, value=b"open-0", partition=0)
    open_one.flush(20)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        plain.produce(topic, value=b"plain-%d" % i, partition=0)
    assert plain.flush(20) == 0
    assert read_all(cluster.bootstrap, topic, 1, "read_committed", 0, timeout=3) == []
    assert len(read_all(cluster.bootstrap, topic, 1, "read_uncommitted", 11)) == 11
    open_one.commit_transaction(20)
    after = read_all(cluster.bootstrap, topic, 1, "read_committed", 11)
    assert sorted(after) == sorted([b"open-0", *(b"plain-%d" % i for i in range(10))])


def test_held_back_read_committed_fetch_wakes_on_the_commit(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """A read_committed fetch held back by an open transaction waits for its marker
    (Kafka's delayed fetch on the last stable offset), not for its whole max_wait: with
    fetch.wait.max.ms 5000 the committed record arrives well within a second."""
    cluster = module_kafka_cluster
    topic = unique_name("wake")
    cluster.create_topic(topic, 1)
    producer = txn_producer(cluster.bootstrap, unique_name("tid"))
    producer.begin_transaction()
    producer.produce(topic, value=b"held", partition=0)
    producer.flush(20)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": unique_name("g"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert consumer.poll(1.5) is None  # its fetch now waits on the broker
        producer.commit_transaction(20)
        committed = time.monotonic()
        msg = consumer.poll(5)
        waited = time.monotonic() - committed
    finally:
        consumer.close()
    print(f"the committed record came {waited * 1000:.0f} ms after commit_transaction returned")
    assert msg is not None and msg.error() is None and msg.value() == b"held"
    assert waited < 1.0


def native_produce(address: str, fields: dict[str, Any], payload: bytes) -> list[Any]:
    """One native produce request, by hand (a client that writes what it likes); the
    answer's parts."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(protocol.encode_request(protocol.PRODUCE, 1, fields, len(payload)) + payload)
        decoder = protocol.FrameDecoder()
        while (frame := decoder.next_frame()) is None:
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            decoder.feed(data)
    return parse_produce_answer(frame.header)


def test_only_the_coordinator_appends_markers(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """A native producer's control batch (a forged COMMIT marker) is refused with a
    clear error and nothing is appended; the same batch marked as a coordinator's
    (``markers``, allowed here: no ACLs, so every principal has the brokers' rights)
    is appended, as the coordinator's remote marker writes are."""
    cluster = module_kafka_cluster
    topic = unique_name("forged")
    cluster.create_topic(topic, 1)
    batch = bytes(marker_batch(4242, 0, True))
    address = cluster.native[0]
    refused = native_produce(address, encode_produce_request(1, [ProducePart(topic, 0, len(batch))]), batch)
    print("a forged marker:", refused)
    assert refused[0].error == ControlBatchRefusedError.code
    assert "only the transaction coordinator writes markers" in refused[0].message
    marked = encode_produce_request(1, [ProducePart(topic, 0, len(batch))], markers=True)
    assert native_produce(address, marked, batch)[0].error == 0
    with SimpleConsumer(brokers=cluster.native) as consumer:
        deadline = time.monotonic() + 10
        while (end := consumer.offsets(topic, 0).end) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # visible once flushed
    assert end == len(batch)  # the marked one only: the refused one was not appended


def test_only_the_brokers_write_the_state_topic(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """__transaction_state is internal, as Kafka's: a client's produce to it is refused
    (InvalidTopicError, nothing appended), so no client can forge a coordinator's state;
    its partitions cannot be added to (each id's state is in its hash's partition), and
    it cannot be deleted."""
    cluster = module_kafka_cluster
    txn_producer(cluster.bootstrap, unique_name("tid"))  # the topic exists from here
    forged = encode_batch([b"{}"], [b"someone"], int(time.time() * 1000))
    refused = native_produce(cluster.native[0], encode_produce_request(1, [ProducePart(TOPIC, 0, len(forged))]), forged)
    assert refused[0].error == InvalidTopicError.code
    assert "only the transaction coordinators write it" in refused[0].message
    admin = Admin(brokers=cluster.native)
    try:
        with pytest.raises(InvalidPartitionsError, match="keeps its partition count"):
            admin.create_partitions(TOPIC, 16)  # would move ids away from their states
        with pytest.raises(InvalidTopicError, match="is internal"):
            admin.delete_topic(TOPIC)  # would forget every id's epoch and open transaction
        assert TOPIC in admin.list_topics()
    finally:
        admin.close()


def test_send_offsets_to_transaction_visible_on_commit_only(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    source, sink, group = unique_name("src"), unique_name("sink"), unique_name("g")
    cluster.create_topic(source, 1)
    cluster.create_topic(sink, 1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(20):
        plain.produce(source, value=b"%d" % i, partition=0)
    assert plain.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(source, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 20
    producer = txn_producer(cluster.bootstrap, unique_name("rpw"))

    # the group's committed offset as a read_uncommitted client asks (no require_stable)
    lenient = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )

    def committed() -> int:
        return lenient.committed([TopicPartition(source, 0)], timeout=10)[0].offset

    # aborted: the group's offset stays where it was (none)
    producer.begin_transaction()
    for msg in got[:10]:
        producer.produce(sink, value=msg.value(), partition=0)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 10)], consumer.consumer_group_metadata(), 20)
    assert committed() < 0  # not visible while the transaction is open
    # a read_committed client asks for stable offsets: UNSTABLE_OFFSET_COMMIT, it asks
    # again until the transaction ends (here: until its own timeout)
    with pytest.raises(KafkaException, match="Timed out"):
        consumer.committed([TopicPartition(source, 0)], timeout=1)
    producer.abort_transaction(20)
    assert committed() < 0
    # committed: the offset and the output together
    producer.begin_transaction()
    for msg in got:
        producer.produce(sink, value=msg.value(), partition=0)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 20)], consumer.consumer_group_metadata(), 20)
    producer.commit_transaction(20)
    assert committed() == 20
    assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 20
    consumer.close()
    lenient.close()
    out = read_all(cluster.bootstrap, sink, 1, "read_committed", 20)
    assert sorted(out) == sorted(b"%d" % i for i in range(20))


def test_second_producer_fences_the_first(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic, txn_id = unique_name("fence"), unique_name("tid")
    cluster.create_topic(topic, 1)
    old = txn_producer(cluster.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(20)
    new = txn_producer(cluster.bootstrap, txn_id)  # aborts old's open transaction, bumps the epoch
    new.begin_transaction()
    new.produce(topic, value=b"new", partition=0)
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as caught:
        old.produce(topic, value=b"zombie-2", partition=0)
        old.commit_transaction(20)
    error = caught.value.args[0]
    print("the old producer got", error)
    assert error.fatal() and error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert read_all(cluster.bootstrap, topic, 1, "read_committed", 1) == [b"new"]


def logged_state(native: list[str], txn_id: str) -> dict[str, Any] | None:
    """The coordinator's state of ``txn_id`` as ``__transaction_state`` holds it (the
    id's last record in its partition, read from the log start: a snapshot and what
    follows), None if it has none or a tombstone."""
    consumer = SimpleConsumer(brokers=native)
    try:
        partition = partition_for(txn_id, len(consumer.partitions(TOPIC)))
        start, end = consumer.offsets(TOPIC, partition)
        raw: bytes | None = None
        offset = start
        while offset < end:
            result = consumer.fetch(TOPIC, partition, offset)
            for batch in result.batches:
                for key, value in zip(batch.keys or [], batch.values, strict=False):
                    if key == txn_id.encode():
                        raw = value
            offset = result.next_offset
        return json.loads(raw) if raw else None
    finally:
        consumer.close()


def wait_state(native: list[str], txn_id: str, ok: Callable[[dict[str, Any] | None], bool], limit: float = 10) -> Any:
    """``logged_state`` once ``ok`` holds for it (records become visible to readers at
    the next flush, as any log's), AssertionError with the last one after ``limit``."""
    deadline = time.monotonic() + limit
    while True:
        state = logged_state(native, txn_id)
        if ok(state):
            return state
        assert time.monotonic() < deadline, f"the state of {txn_id!r} in {TOPIC} stayed {state}"
        time.sleep(0.1)


def restart_kafka(broker: Any) -> None:
    """Start a stopped broker again and return once its Kafka listener (on a new port)
    is up: its native port accepting is not enough (it binds before registering)."""
    lines = broker.log_text().count("speaks Kafka on ")
    broker.start()
    deadline = time.monotonic() + 30
    while broker.log_text().count("speaks Kafka on ") == lines:
        assert time.monotonic() < deadline, f"broker {broker.id} has no Kafka listener again"
        time.sleep(0.1)


def coordinator_of(native: list[str], txn_id: str) -> int:
    """The broker that coordinates ``txn_id``: the leader of its partition of ``__transaction_state``."""
    admin = Admin(brokers=native)
    try:
        partitions = admin.describe_partitions(TOPIC)
        return partitions[partition_for(txn_id, len(partitions))].leader
    finally:
        admin.close()


def test_an_idle_transactional_id_is_forgotten(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """Kafka's transactional.id.expiration.ms: an id with no transaction for that long
    (3 s here) is forgotten (a tombstone in its partition of __transaction_state, and
    its ZooKeeper nodes gone); one with an open transaction stays however long it
    idles (its timeout, 60 s, aborts it instead). A producer that comes back with the
    forgotten id starts over and commits."""
    cluster = module_kafka_cluster
    topic, idle_id, open_id = unique_name("idle"), unique_name("idle"), unique_name("open")
    cluster.create_topic(topic, 1)
    idle = txn_producer(cluster.bootstrap, idle_id)
    idle.begin_transaction()
    idle.produce(topic, value=b"one", partition=0)
    idle.commit_transaction(20)
    committed = time.monotonic()
    still_open = txn_producer(cluster.bootstrap, open_id)
    still_open.begin_transaction()
    still_open.produce(topic, value=b"open", partition=0)
    still_open.flush(20)
    wait_state(cluster.native, idle_id, lambda state: state is not None)
    # the expiry plus a scan or two
    wait_state(cluster.native, idle_id, lambda state: state is None, limit=IDLE_ID_MS / 1000 + 5)
    gone_after = time.monotonic() - committed
    open_state = logged_state(cluster.native, open_id)
    assert open_state is not None and open_state["state"] == "Ongoing"  # open: kept
    client = KazooClient(hosts=cluster.zk_connect)
    client.start(timeout=10)
    try:
        assert client.exists(state_path(idle_id)) is None, "the idle id is still in ZooKeeper"
    finally:
        client.stop()
        client.close()
    print(f"the idle id was forgotten {gone_after:.1f} s after its commit")
    still_open.abort_transaction(20)
    again = txn_producer(cluster.bootstrap, idle_id)
    again.begin_transaction()
    again.produce(topic, value=b"two", partition=0)
    again.commit_transaction(20)
    assert sorted(read_all(cluster.bootstrap, topic, 1, "read_committed", 2)) == [b"one", b"two"]


def test_transaction_past_its_timeout_is_aborted(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    topic = unique_name("timeout")
    cluster.create_topic(topic, 1)
    producer = txn_producer(cluster.bootstrap, unique_name("slow"), **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"late-%d" % i, partition=0)
    producer.flush(20)
    time.sleep(2.5)  # the timeout itself is the scenario: 1 s, checked every second
    with pytest.raises(KafkaException) as caught:
        producer.commit_transaction(20)
    print("commit after the timeout:", caught.value.args[0])
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(20) == 0
    # the abort marker ended the transaction: what follows it is readable, its data never
    assert read_all(cluster.bootstrap, topic, 1, "read_committed", 1) == [b"after"]
    assert len(read_all(cluster.bootstrap, topic, 1, "read_uncommitted", 6)) == 6


def test_coordinator_state_survives_a_kill_9_of_its_broker(kafka_cluster: Any) -> None:
    """3 brokers, a topic of 3 partitions (replicated on all three, so its leaders are
    spread and markers go to other brokers too). A transaction is left open, the
    coordinator of its id killed with -9: the new coordinator reads the id's state from
    ZooKeeper, so a new producer of the id fences the old one, its open transaction is
    aborted (markers into all 3 partitions) and its own commit is read exactly."""
    cluster = kafka_cluster(
        3, default_replication_factor=3, min_insync_replicas=2, replica_lag_time_max_ms=1500, zk_session_timeout_s=3.0
    )
    topic = "moving-txn"
    cluster.create_topic(topic, 3, rf=3)
    txn_id = "t-moving"
    old = txn_producer(cluster.bootstrap, txn_id)  # creates __transaction_state (rf 3)
    coordinator = coordinator_of(cluster.native, txn_id)
    old.begin_transaction()
    for i in range(30):
        old.produce(topic, value=b"open-%d" % i, partition=i % 3)
    old.flush(20)
    before = wait_state(cluster.native, txn_id, lambda s: s is not None and len(s["partitions"]) == 3)
    assert before["state"] == "Ongoing"

    next(b for b in cluster.brokers if b.id == coordinator).kill()
    survivors = [b for b in cluster.brokers if b.id != coordinator]
    bootstrap = ",".join(b.kafka_address() for b in survivors)
    native = [b.address for b in survivors]
    new = txn_producer(bootstrap, txn_id, **{"transaction.timeout.ms": 30000})
    assert coordinator_of(native, txn_id) != coordinator
    after_init = wait_state(native, txn_id, lambda s: s is not None and s["epoch"] > before["epoch"] + 1)
    assert after_init["producer_id"] == before["producer_id"]
    assert after_init["epoch"] == before["epoch"] + 2  # +1 aborting the open one, +1 the new producer
    new.begin_transaction()
    for i in range(30):
        new.produce(topic, value=b"new-%d" % i, partition=i % 3)
    new.commit_transaction(30)
    # the decision is stored before the answer; CompleteCommit follows within a second
    wait_state(native, txn_id, lambda s: s is not None and s["state"] == "CompleteCommit")
    committed = read_all(bootstrap, topic, 3, "read_committed", 30)
    everything = read_all(bootstrap, topic, 3, "read_uncommitted", 60)
    print(f"after the kill: read_committed {len(committed)}, read_uncommitted {len(everything)}")
    assert sorted(committed) == sorted(b"new-%d" % i for i in range(30))
    assert len(everything) == 60
    with pytest.raises(KafkaException):
        old.commit_transaction(10)  # the old producer is fenced wherever it turns


def test_state_is_rebuilt_from_the_log_after_a_kill_9_and_restart(kafka_cluster: Any) -> None:
    """One broker, killed with -9 while a transaction of 20 records is open and
    restarted: it rebuilds the id's state by replaying its partition of
    __transaction_state, so a new producer of the id gets the same producer id two
    epochs on, the open transaction is aborted and the new one's records are exactly
    what read_committed reads."""
    cluster = kafka_cluster(1)
    topic, txn_id = "restart-txn", "t-restart"
    cluster.create_topic(topic, 1)
    old = txn_producer(cluster.bootstrap, txn_id)
    for committed in range(3):  # a few records before the open transaction
        old.begin_transaction()
        old.produce(topic, value=b"committed-%d" % committed, partition=0)
        old.commit_transaction(20)
    old.begin_transaction()
    for i in range(20):
        old.produce(topic, value=b"open-%d" % i, partition=0)
    old.flush(20)
    before = wait_state(cluster.native, txn_id, lambda s: s is not None and s["state"] == "Ongoing")
    broker = cluster.brokers[0]
    broker.kill()
    restart_kafka(broker)
    new = txn_producer(cluster.bootstrap, txn_id)
    after = wait_state(cluster.native, txn_id, lambda s: s is not None and s["epoch"] > before["epoch"] + 1)
    assert (after["producer_id"], after["epoch"]) == (before["producer_id"], before["epoch"] + 2)
    new.begin_transaction()
    for i in range(10):
        new.produce(topic, value=b"new-%d" % i, partition=0)
    new.commit_transaction(20)
    expected = [b"committed-%d" % i for i in range(3)] + [b"new-%d" % i for i in range(10)]
    assert sorted(read_all(cluster.bootstrap, topic, 1, "read_committed", 13)) == sorted(expected)
    assert len(read_all(cluster.bootstrap, topic, 1, "read_uncommitted", 33)) == 33
    assert "loaded in leader epoch" in broker.log_text()


def test_snapshots_bound_the_state_log_and_replay_after_a_kill_9(kafka_cluster: Any) -> None:
    """With snapshots every 2 KiB of a state partition, 25 transactions of one id
    (about 12 KiB of state records) make one: the partition's log start moves past its
    first records, and a broker
    killed with -9 and restarted replays from there (a snapshot and what follows) to
    the same state: the id's next producer gets its producer id at the next epoch and
    every committed record is read once."""
    cluster = kafka_cluster(1, transaction_state_snapshot_bytes=2048)
    topic, txn_id = "snapshots", "t-snapshots"
    cluster.create_topic(topic, 1)
    producer = txn_producer(cluster.bootstrap, txn_id)
    for i in range(25):
        producer.begin_transaction()
        producer.produce(topic, value=b"v-%d" % i, partition=0)
        producer.commit_transaction(20)
    broker = cluster.brokers[0]
    deadline = time.monotonic() + 10
    while "snapshot of" not in broker.log_text():
        assert time.monotonic() < deadline, "no snapshots of the state partition"
        time.sleep(0.2)
    before = wait_state(cluster.native, txn_id, lambda s: s is not None and s["state"] == "CompleteCommit")
    consumer = SimpleConsumer(brokers=cluster.native)
    try:
        assert consumer.offsets(TOPIC, partition_for(txn_id, len(consumer.partitions(TOPIC)))).start > 0
    finally:
        consumer.close()
    broker.kill()
    restart_kafka(broker)
    again = txn_producer(cluster.bootstrap, txn_id)
    again.begin_transaction()
    again.produce(topic, value=b"after", partition=0)
    again.commit_transaction(20)
    after = wait_state(cluster.native, txn_id, lambda s: s is not None and s["epoch"] > before["epoch"])
    assert (after["producer_id"], after["epoch"]) == (before["producer_id"], before["epoch"] + 1)
    expected = sorted([b"v-%d" % i for i in range(25)] + [b"after"])
    assert sorted(read_all(cluster.bootstrap, topic, 1, "read_committed", 26)) == expected


def test_transactions_go_on_while_the_coordinator_moves_and_back(kafka_cluster: Any) -> None:
    """3 brokers, __transaction_state with replication factor 3. The coordinator of a
    producer's id is stopped between two transactions: the partition's next leader
    replays it and the same producer (no new init_transactions) commits on; the broker
    comes back, leadership may move again: still the same producer commits. Every
    committed record is read once, nothing else."""
    cluster = kafka_cluster(3, default_replication_factor=3, min_insync_replicas=2, replica_lag_time_max_ms=1500)
    topic, txn_id = "moving-coordinator", "t-moves"
    cluster.create_topic(topic, 2, rf=3)
    producer = txn_producer(cluster.bootstrap, txn_id)
    sent: list[bytes] = []

    def one_transaction(tag: str) -> None:
        producer.begin_transaction()
        for i in range(10):
            value = b"%s-%d" % (tag.encode(), i)
            producer.produce(topic, value=value, partition=i % 2)
            sent.append(value)
        producer.commit_transaction(60)

    one_transaction("first")
    first = coordinator_of(cluster.native, txn_id)
    moved = next(b for b in cluster.brokers if b.id == first)
    moved.stop()
    others = [b.address for b in cluster.brokers if b.id != first]
    deadline = time.monotonic() + 20
    while coordinator_of(others, txn_id) in (first, -1):
        assert time.monotonic() < deadline, "no other broker took the coordinator's partition over"
        time.sleep(0.2)
    one_transaction("moved")
    restart_kafka(moved)
    one_transaction("back")
    committed = read_all(cluster.bootstrap, topic, 2, "read_committed", len(sent))
    assert sorted(committed) == sorted(sent)
    state = wait_state(cluster.native, txn_id, lambda s: s is not None and s["state"] == "CompleteCommit")
    assert state["epoch"] == 0  # the one producer throughout


def test_state_zookeeper_holds_from_before_the_log_is_taken_over(kafka_cluster: Any) -> None:
    """An id whose state logfery kept in ZooKeeper before __transaction_state (main
    before this change wrote /kafka_transactions/<id>, JSON without "mirror"), with a
    transaction open in a partition: the coordinator that loads the id's partition and
    finds no record of the id takes the ZooKeeper state over. So the next producer of
    the id keeps its producer id at the next epochs, the open transaction is aborted
    and never read committed, and the znode is marked as taken over. Made here by
    writing such a state and emptying the broker's __transaction_state logs while it
    is down."""
    cluster = kafka_cluster(1)
    topic, txn_id = "legacy-txn", "t-legacy"
    cluster.create_topic(topic, 1)
    old = txn_producer(cluster.bootstrap, txn_id)
    old.begin_transaction()
    for i in range(10):
        old.produce(topic, value=b"open-%d" % i, partition=0)
    old.flush(20)
    now = int(time.time() * 1000)
    logged = wait_state(cluster.native, txn_id, lambda s: s is not None and s["state"] == "Ongoing")
    legacy = TxnMetadata(
        txn_id,
        logged["producer_id"],
        logged["epoch"],
        60_000,
        TxnState.ONGOING,
        {(topic, 0)},
        set(),
        now,
        now,
    )
    broker = cluster.brokers[0]
    broker.kill()
    for directory in broker.log_dir.glob(f"{TOPIC}-*"):  # as if the log had never been
        for path in sorted(directory.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    client = KazooClient(hosts=cluster.zk_connect)
    client.start(timeout=10)
    try:
        client.create(state_path(txn_id), legacy.to_json(), makepath=True)  # as main wrote it
        restart_kafka(broker)
        new = txn_producer(cluster.bootstrap, txn_id)
        new.begin_transaction()
        for i in range(5):
            new.produce(topic, value=b"new-%d" % i, partition=0)
        new.commit_transaction(20)
        taken = json.loads(client.get(state_path(txn_id))[0])
    finally:
        client.stop()
        client.close()
    assert taken.get("mirror") is True
    after = wait_state(cluster.native, txn_id, lambda s: s is not None and s["state"] == "CompleteCommit")
    assert (after["producer_id"], after["epoch"]) == (logged["producer_id"], logged["epoch"] + 2)
    assert sorted(read_all(cluster.bootstrap, topic, 1, "read_committed", 5)) == [b"new-%d" % i for i in range(5)]
    assert len(read_all(cluster.bootstrap, topic, 1, "read_uncommitted", 15)) == 15
    assert "took over 1 transactional ids from ZooKeeper" in broker.log_text()


LOOP = r"""
import sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, source, sink, group, txn_id, partitions = sys.argv[1:7]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
producer.init_transactions(30)  # first: it aborts what a killed predecessor left open
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
assigned = [TopicPartition(source, p) for p in range(int(partitions))]
consumer.assign(assigned)  # at the group's committed offsets
print("READY", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    msgs = [m for m in consumer.consume(20, 0.2) if m.error() is None]
    if not msgs:  # done once every partition's committed offset is its end
        ends = [consumer.get_watermark_offsets(tp, timeout=5)[1] for tp in assigned]
        if all(c.offset >= end for c, end in zip(consumer.committed(assigned, timeout=5), ends)):
            break
        continue
    producer.begin_transaction()
    for m in msgs:
        producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    print("COMMITTED", flush=True)
else:
    sys.exit("not done in 60 s")
print("DONE", flush=True)
"""


def test_read_process_write_killed_at_random_points_leaves_each_input_once(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Any
) -> None:
    """Issue 35's exactly-once loop: a consume-transform-produce process with
    confluent-kafka's transactions (output and input offsets in one transaction),
    killed with -9 at random points 4 times and restarted; afterwards the output topic
    holds each input exactly once as a read_committed consumer sees it."""
    cluster = module_kafka_cluster
    source, sink, group, txn_id = unique_name("in"), unique_name("out"), unique_name("g"), unique_name("loop")
    cluster.create_topic(source, 3)
    cluster.create_topic(sink, 3)
    n = 900
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(n):
        plain.produce(source, value=b"%d" % i, partition=i % 3)
    assert plain.flush(20) == 0
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    args = [sys.executable, str(script), cluster.bootstrap, source, sink, group, txn_id, "3"]
    rng = random.Random(35)
    for kill in range(4):
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
            proc.stdout.readline()  # once it committed a first transaction (or ended)
            time.sleep(rng.uniform(0, 0.3))  # then at a random point of the loop
        finally:
            proc.kill()
            proc.communicate(timeout=10)
        print(f"kill {kill + 1}: the loop killed {proc.returncode}")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "DONE" in out
    got = read_all(cluster.bootstrap, sink, 3, "read_committed", n)
    uncommitted = read_all(cluster.bootstrap, sink, 3, "read_uncommitted", n)
    print(f"inputs {n}; read_committed outputs {len(got)}, read_uncommitted {len(uncommitted)} (aborted included)")
    duplicates = sorted(v for v, c in collections.Counter(got).items() if c > 1)
    assert not duplicates, f"read twice: {duplicates}"
    assert sorted(got) == sorted(b"out-%d" % i for i in range(n))


def test_pending_offsets_of_an_ended_transaction_are_refused(zk_client: Any) -> None:
    """A TxnOffsetCommit checked against an Ongoing transaction that ends before its
    write lands (a killed producer's late request) leaves nothing behind: the write
    fails, so no stale offset is published later nor keeps a group unstable."""
    ends = store.end_count(zk_client, "tid")
    store.write_pending_offsets(zk_client, "tid", "g/1", 5, 0, [("t", 0, 10), ("t", 1, 4)], ends)
    store.write_pending_offsets(zk_client, "tid", "g/1", 5, 0, [("t", 0, 12)], ends)
    assert store.read_pending_offsets(zk_client, "tid") == {"g/1": [("t", 0, 12), ("t", 1, 4)]}
    assert store.pending_for_group(zk_client, "g/1") == {("t", 0), ("t", 1)}
    store.mark_end(zk_client, "tid")  # the transaction ends: EndTxn, an abort, a timeout
    with pytest.raises(store.StaleStateError):
        store.write_pending_offsets(zk_client, "tid", "g/1", 5, 0, [("t", 2, 1)], ends)
    store.delete_pending_offsets(zk_client, "tid")
    assert store.read_pending_offsets(zk_client, "tid") == {}
    assert store.pending_for_group(zk_client, "g/1") == set()


def test_aiokafka_and_kafka_python_transactional_producers(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """The other Python clients' transactional producers: each commits 10 records and
    aborts 10; read_committed reads the 20 committed ones."""
    cluster = module_kafka_cluster
    topic = unique_name("pyclients")
    cluster.create_topic(topic, 1)

    async def with_aiokafka() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=unique_name("aio"))
        await producer.start()  # InitProducerId through the transaction coordinator
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send_and_wait(topic, b"aio-commit-%d" % i, partition=0)
            await producer.begin_transaction()
            for i in range(10):
                await producer.send_and_wait(topic, b"aio-abort-%d" % i, partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(with_aiokafka(), 30))
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=unique_name("kp"))
    try:
        kp.init_transactions()
        for outcome in ("commit", "abort"):
            kp.begin_transaction()
            for i in range(10):
                kp.send(topic, b"kp-%s-%d" % (outcome.encode(), i), partition=0)
            kp.flush(20)
            kp.commit_transaction() if outcome == "commit" else kp.abort_transaction()
    finally:
        kp.close(5)
    got = read_all(cluster.bootstrap, topic, 1, "read_committed", 20)
    assert sorted(got) == sorted(
        [*(b"aio-commit-%d" % i for i in range(10)), *(b"kp-commit-%d" % i for i in range(10))]
    )
    assert len(read_all(cluster.bootstrap, topic, 1, "read_uncommitted", 40)) == 40
