"""SASL SCRAM on the Kafka listener, driven by Kafka clients nobody here wrote
(confluent-kafka/librdkafka, kafka-python, aiokafka, Debian's kcat) against real
brokers, a real ZooKeeper and certificates made by ``broker.common.certs`` (``logferry
certs``).

Users are the native listener's (``logferry user create``); the Kafka listener is a
``[[listeners]]`` entry with ``protocol = "kafka"`` and its own ``tls`` and ``auth``
tables. Wrong passwords and unknown users fail alike; requests before authentication
close the connection; the authenticated principal is what ACLs decide on, with Kafka's
own *_AUTHORIZATION_FAILED codes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as RdProducer

from broker.client import Admin, Producer, SaslCredentials, SimpleConsumer
from broker.common.config import dumps
from broker.testing.localrun import free_port
from tests.integration.test_authentication import PASSWORD, broker_tls, create_user, logferry
from tests.integration.test_kafka_clients import _closed, _frame, _read_frame
from tests.support.pki import Pki

pytestmark = pytest.mark.integration

N = 200


class SaslBroker:
    """One broker: a native listener ``local`` (plaintext; SASL offered, so the test's
    admin may authenticate) and a Kafka listener requiring SASL, over TLS or not."""

    def __init__(self, process: Any, security: str, pki: Pki):
        self.process = process
        self.security = security
        self.pki = pki

    @property
    def bootstrap(self) -> str:
        return self.process.kafka_address()

    @property
    def native(self) -> list[str]:
        return [self.process.address]

    def rd(self, user: str, password: str = PASSWORD, mechanism: str = "SCRAM-SHA-256", **extra: Any) -> dict[str, Any]:
        """librdkafka settings for ``user``."""
        settings = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security,
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            **extra,
        }
        if self.security == "SASL_SSL":
            settings["ssl.ca.location"] = str(self.pki.ca)
        return settings

    def admin(self, user: str = "admin") -> Admin:
        return Admin(brokers=self.native, sasl=SaslCredentials(user, PASSWORD))


def sasl_broker(
    broker_cluster: Any, pki: Pki, security: str = "SASL_SSL", authorizer: dict[str, Any] | None = None
) -> SaslBroker:
    cluster = broker_cluster(0)
    process = cluster.add({"num_partitions": 1}, start=False)
    doc = tomllib.loads(process.config_file.read_text())
    doc["broker"].pop("host")
    doc["broker"].pop("port")
    kafka: dict[str, Any] = {"name": "kafka", "port": free_port(), "protocol": "kafka", "auth": {"required": True}}
    if security == "SASL_SSL":
        kafka["tls"] = broker_tls(pki)
    else:  # SASL_PLAINTEXT: SCRAM proofs in clear must be asked for
        kafka["auth"]["allow_plaintext"] = True
    doc["listeners"] = [
        {"name": "local", "port": process.port, "auth": {"required": False, "allow_plaintext": True}},
        kafka,
    ]
    if authorizer is not None:
        doc["authorizer"] = authorizer
    process.config_file.write_text(dumps(doc))
    process.config_file.chmod(0o600)
    process.start()
    return SaslBroker(process, security, pki)


def rd_produce(settings: dict[str, Any], topic: str, n: int, timeout: float = 30) -> list[Any]:
    """Produce ``n`` keyed messages with a header; the delivery errors (None: acked)."""
    errors: list[Any] = []
    producer = RdProducer({**settings, "acks": "all", "linger.ms": 5, "message.timeout.ms": int(timeout * 1000)})
    for i in range(n):
        producer.produce(
            topic,
            key=f"k{i % 7}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err),
        )
        producer.poll(0)
    producer.flush(timeout + 10)
    return errors


def rd_group_consume(
    settings: dict[str, Any], topic: str, group: str, n: int, timeout: float = 30
) -> tuple[list[Any], list[Any]]:
    """Consume up to ``n`` messages as a member of ``group``, committing; (messages,
    errors)."""
    consumer = RdConsumer({**settings, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[Any] = []
    errors: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
                if msg.error().fatal() or len(errors) > 5:
                    break
                continue
            got.append(msg)
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got, errors


@pytest.mark.parametrize("security", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_librdkafka_produces_and_consumes_with_scram(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, security: str
) -> None:
    create_user(zk_connect, tmp_path, "alice")
    create_user(zk_connect, tmp_path, "admin")
    broker = sasl_broker(broker_cluster, pki, security)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        topic = f"scram-{mechanism[-3:]}"
        with broker.admin() as admin:
            admin.create_topic(topic, 1, 1)
        settings = broker.rd("alice", mechanism=mechanism)
        assert rd_produce(settings, topic, N) == [None] * N
        got, errors = rd_group_consume(settings, topic, f"g-{mechanism[-3:]}", N)
        assert not errors
        assert [m.value() for m in got] == [f"v{i}".encode() for i in range(N)]
        assert [m.key() for m in got] == [f"k{i % 7}".encode() for i in range(N)]
        assert [m.headers() for m in got] == [[("n", str(i).encode())] for i in range(N)]
        # the group's commit went through the coordinator as User:alice
        consumer = RdConsumer({**settings, "group.id": f"g-{mechanism[-3:]}"})
        try:
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        finally:
            consumer.close()
        assert committed[0].offset > got[-1].offset()
    log = broker.process.log_text()
    assert "first connection of User:alice" in log
    assert PASSWORD not in log and "Traceback" not in log


def _failed_login(settings: dict[str, Any]) -> str:
    """The error librdkafka reports for a login that fails."""
    errors: list[Any] = []
    producer = RdProducer({**settings, "error_cb": errors.append, "reconnect.backoff.ms": 2000})
    deadline = time.monotonic() + 20
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error reported: {errors}"
    return str(auth[0].str())


@pytest.mark.slow
def test_wrong_password_and_unknown_user_fail_alike(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    create_user(zk_connect, tmp_path, "carol")
    broker = sasl_broker(broker_cluster, pki)
    wrong = _failed_login(broker.rd("carol", "not the password"))
    unknown = _failed_login(broker.rd("nobody", "not the password"))
    for text in (wrong, unknown):
        assert (
            "SASL_AUTHENTICATION_FAILED" in text or "Authentication failed" in text or "authentication failed" in text
        ), text
        assert "unknown user or wrong password" in text, text
    # the same sentence for both: which part was wrong is not told
    assert wrong.split(" for ")[0] == unknown.split(" for ")[0]

    from kafka import KafkaProducer

    with pytest.raises(Exception) as failed:
        KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            security_protocol="SASL_SSL",
            ssl_cafile=str(pki.ca),
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="carol",
            sasl_plain_password="nope",
            max_block_ms=5000,
        ).close()
    # kafka-python retries until max_block_ms and says why in its log
    assert "Unable to bootstrap" in str(failed.value)
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "unknown user or wrong password for 'carol' with SCRAM-SHA-512" in caplog.text
    log = broker.process.log_text()
    assert "authentication failed" in log and "not the password" not in log
    # the right password still works after all that
    create_user(zk_connect, tmp_path, "admin")
    with broker.admin() as admin:
        admin.create_topic("after", 1, 1)
    assert rd_produce(broker.rd("carol"), "after", 3) == [None] * 3


def test_requests_before_authentication_close_the_connection(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path
) -> None:
    create_user(zk_connect, tmp_path, "admin")
    broker = sasl_broker(broker_cluster, pki, "SASL_PLAINTEXT")
    host, port = broker.bootstrap.rsplit(":", 1)
    addr = (host, int(port))
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(_frame(18, 0, 1))  # ApiVersions v0: allowed first
        answer = _read_frame(sock)
        corr, error, count = struct.unpack_from(">ihi", answer)
        assert (corr, error) == (1, 0)
        apis = {struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count)}
        assert (17, 0, 1) in apis and (36, 0, 2) in apis
        sock.sendall(_frame(3, 1, 2, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert _closed(sock)  # no answer: closed
    with socket.create_connection(addr, timeout=5) as sock:  # not even ApiVersions first
        sock.sendall(_frame(0, 3, 1, struct.pack(">hhii", -1, 1, 1000, 0)))  # Produce v3
        assert _closed(sock)
    # SaslHandshake v0 (raw tokens after it) is not offered: UNSUPPORTED_VERSION (35)
    with socket.create_connection(addr, timeout=5) as sock:
        mech = b"SCRAM-SHA-256"
        sock.sendall(_frame(17, 0, 4, struct.pack(">h", len(mech)) + mech))
        assert struct.unpack_from(">ih", _read_frame(sock)) == (4, 35)
        assert _closed(sock)
    # the native listener and authenticated Kafka clients are unaffected
    with broker.admin() as admin:
        admin.create_topic("fine", 1, 1)
    assert rd_produce(broker.rd("admin"), "fine", 2) == [None, None]


def test_acls_decide_on_the_scram_principal_with_kafka_codes(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path
) -> None:
    for name in ("admin", "alice", "bob"):
        create_user(zk_connect, tmp_path, name)
    broker = sasl_broker(broker_cluster, pki, authorizer={"enabled": True, "super_users": ["User:admin"]})
    for args in (
        ("--operation", "produce", "--operation", "consume", "--topic", "owned"),
        ("--operation", "consume", "--group", "alice-group"),
        ("--operation", "produce", "--transactional-id", "alice-txn"),
        ("--operation", "describe", "--transactional-id", "seen-txn"),
    ):
        done = logferry("acl", "add", "--zk", zk_connect, "--principal", "User:alice", *args, "--allow")
        assert done.returncode == 0, done.stderr
    with broker.admin() as admin:
        admin.create_topic("owned", 1, 1)
        admin.create_topic("other", 1, 1)
    time.sleep(0.5)  # the ACL watch
    alice = broker.rd("alice")
    assert rd_produce(alice, "owned", 10) == [None] * 10
    got, errors = rd_group_consume(alice, "owned", "alice-group", 10)
    assert len(got) == 10 and not errors
    # a topic alice may not use
    denied = rd_produce(alice, "other", 1, timeout=10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], denied
    # a group alice may not join
    got, errors = rd_group_consume(alice, "owned", "someone-elses", 1, timeout=10)
    assert not got and errors
    assert {e.code() for e in errors} == {KafkaError.GROUP_AUTHORIZATION_FAILED}, errors
    # transactions: on the transactional ids alice may use (Kafka's WRITE on the
    # TransactionalId), not on another
    producer = RdProducer({**alice, "transactional.id": "alice-txn"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("owned", b"in a transaction", partition=0)
    producer.commit_transaction(20)
    # no right at all: FindCoordinator refuses; describe only (FindCoordinator passes):
    # InitProducerId refuses
    for txn_id in ("bobs-txn", "seen-txn"):
        with pytest.raises(KafkaException) as caught:
            RdProducer({**alice, "transactional.id": txn_id}).init_transactions(20)
        assert caught.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, caught.value
    # bob authenticates fine and may do nothing
    denied = rd_produce(broker.rd("bob"), "owned", 1, timeout=10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], denied
    # the superuser may
    assert rd_produce(broker.rd("admin", mechanism="SCRAM-SHA-512"), "other", 1) == [None]
    assert "Traceback" not in broker.process.log_text()


def test_kafka_python_aiokafka_and_kcat_with_scram(broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

    create_user(zk_connect, tmp_path, "dave")
    create_user(zk_connect, tmp_path, "admin")
    broker = sasl_broker(broker_cluster, pki)
    with broker.admin() as admin:
        for topic in ("kp", "aio"):
            admin.create_topic(topic, 1, 1)
    common = {
        "bootstrap_servers": broker.bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "dave",
        "sasl_plain_password": PASSWORD,
    }

    producer = KafkaProducer(**common, acks="all")
    for i in range(N):
        producer.send("kp", value=f"p{i}".encode(), key=b"k", partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(**common, consumer_timeout_ms=8000)
    consumer.assign([KpTopicPartition("kp", 0)])
    consumer.seek_to_beginning()
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [f"p{i}".encode() for i in range(N)]

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.helpers import create_ssl_context

        settings = {
            "bootstrap_servers": broker.bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(pki.ca)),
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "dave",
            "sasl_plain_password": PASSWORD,
        }
        producer = AIOKafkaProducer(**settings, acks="all")
        await producer.start()
        try:
            for i in range(N):
                await producer.send("aio", f"a{i}".encode(), partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio", **settings, auto_offset_reset="earliest", group_id="aio-group", enable_auto_commit=False
        )
        await consumer.start()
        out: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    out.append(msg.value)
                    if len(out) == N:
                        break
        finally:
            await consumer.stop()
        return out

    assert asyncio.run(aio()) == [f"a{i}".encode() for i in range(N)]

    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: run scripts/install-system-deps.sh as root")
    sasl_args = [
        "-b",
        broker.bootstrap,
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        f"ssl.ca.location={pki.ca}",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-256",
        "-X",
        "sasl.username=dave",
        "-X",
        f"sasl.password={PASSWORD}",
    ]
    listed = subprocess.run([kcat, *sasl_args, "-L", "-J"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    meta = json.loads(listed.stdout)
    assert {t["topic"] for t in meta["topics"]} >= {"kp", "aio"}
    read = subprocess.run(
        [kcat, *sasl_args, "-C", "-t", "kp", "-o", "beginning", "-e", "-q"], capture_output=True, text=True, timeout=60
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == [f"p{i}" for i in range(N)]
    bad = subprocess.run(
        [kcat, *sasl_args[:-2], "-X", "sasl.password=wrong", "-L", "-m", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "unknown user or wrong password" in bad.stderr, bad.stderr
    # native clients on the other listener are untouched by all this
    with Producer(brokers=broker.native, sasl=SaslCredentials("dave", PASSWORD), acks=1) as native:
        native.send("kp", b"native", partition=0).wait(10)
    with SimpleConsumer(brokers=broker.native, sasl=SaslCredentials("dave", PASSWORD)) as native_consumer:
        tail = [m.value for m in native_consumer.messages("kp", 0, "earliest", limit=N + 1)]
    assert tail[-1] == b"native" and len(tail) == N + 1
