"""Named listeners against real brokers, a real ZooKeeper and real TLS handshakes.

Each broker has a plaintext ``local`` listener (the default one) and a TLS + SCRAM
``external`` one; followers replicate over the listener ``inter_broker_listener``
names; clients pick a listener by name and are sent to the same listener of every
broker; a plaintext client on the external listener gets the one-line TLS error.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from broker.client import Admin, Producer, SaslCredentials, SimpleConsumer
from broker.common.config import dumps
from broker.common.errors import BrokerNotAvailableError
from broker.common.tls import TlsConfig
from broker.coordination import zk as zkmod
from broker.testing.localrun import free_port
from tests.integration.test_authentication import PASSWORD, broker_tls, create_user, logferry
from tests.support.pki import Pki

pytestmark = pytest.mark.integration


def listener_cluster(
    broker_cluster: Any, pki: Pki, n: int, inter: str, metrics: dict[str, Any] | None = None
) -> tuple[Any, list[int]]:
    """``n`` brokers, each with ``local`` (plaintext, default) and ``external`` (TLS,
    SCRAM required) listeners; followers fetch over ``inter``. Returns the cluster and
    each broker's external port."""
    cluster = broker_cluster(0)
    external_ports = []
    for _ in range(n):
        process = cluster.add(start=False)
        doc = tomllib.loads(process.config_file.read_text())
        doc["broker"].pop("host")
        doc["broker"].pop("port")
        doc["broker"]["inter_broker_listener"] = inter
        external = free_port()
        external_ports.append(external)
        doc["listeners"] = [
            {"name": "local", "host": "127.0.0.1", "port": process.port},
            {
                "name": "external",
                "host": "127.0.0.1",
                "port": external,
                "tls": broker_tls(pki),
                "auth": {"required": True},
            },
        ]
        if inter == "external":  # the followers authenticate to the external listener
            doc["sasl"] = {"username": "broker", "password_env": "LOGFERRY_TEST_BROKER_PASSWORD"}
        if metrics:
            doc["metrics"] = metrics
            doc["broker"]["metrics_port"] = free_port()
        process.config_file.write_text(dumps(doc))
        process.config_file.chmod(0o600)
    return cluster, external_ports


def start_all(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGFERRY_TEST_BROKER_PASSWORD", PASSWORD)
    for process in cluster.brokers:
        process.start()


def remote_ports(pid: int) -> set[int]:
    """The remote ports of the process's established TCP connections (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[9] in inodes and parts[3] == "01":  # ESTABLISHED
                ports.add(int(parts[2].rsplit(":", 1)[1], 16))
    return ports


def wait_for(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_each_listener_serves_its_clients_and_followers_use_the_chosen_one(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_user(zk_connect, tmp_path, "broker")
    create_user(zk_connect, tmp_path, "alice")
    cluster, external = listener_cluster(broker_cluster, pki, 2, inter="external")
    start_all(cluster, monkeypatch)
    local = [b.port for b in cluster.brokers]

    # every listener is registered; the old fields keep the default (first) listener
    client = zkmod.connect(zk_connect, create=False)
    try:
        for process, ext in zip(cluster.brokers, external, strict=True):
            data = zkmod.decode(client.get(f"{zkmod.BROKER_IDS}/{process.id}")[0])
            assert (data["host"], data["port"]) == ("127.0.0.1", process.port)
            assert zkmod.registered_listeners(data) == {
                "local": ("127.0.0.1", process.port),
                "external": ("127.0.0.1", ext),
            }
    finally:
        zkmod.close(client)

    # a local tool: plaintext, no listener named, the default one
    with Admin(zk=zk_connect) as admin:
        admin.create_topic("both", 1, 2)
        assert {a[1] for a in admin.cluster.broker_addresses().values()} == set(local)
    tls, alice = TlsConfig(ca_file=pki.ca), SaslCredentials("alice", PASSWORD)
    with Producer(zk=zk_connect, acks="all", linger_ms=2) as producer:
        producer.send("both", b"local", partition=0).wait(20)
    # another host: TLS + SCRAM on the external listener, sent to external addresses
    with Producer(zk=zk_connect, tls=tls, sasl=alice, listener="external", acks="all", linger_ms=2) as producer:
        producer.send("both", b"external", partition=0).wait(20)
        assert {a[1] for a in producer.cluster.broker_addresses().values()} == set(external)
    with SimpleConsumer(zk=zk_connect, tls=tls, sasl=alice, listener="external") as consumer:
        values = [m.value for m in consumer.messages("both", 0, "earliest", limit=2)]
    assert values == [b"local", b"external"]

    # acks=all succeeded, so the follower fetched: over the leader's external port only
    with Admin(zk=zk_connect) as admin:
        leader = admin.cluster.partitions_for("both")[0]
    follower = next(b for b in cluster.brokers if b.id != leader)
    leader_index = next(i for i, b in enumerate(cluster.brokers) if b.id == leader)
    assert follower.proc is not None
    assert wait_for(lambda: external[leader_index] in remote_ports(follower.proc.pid))
    assert local[leader_index] not in remote_ports(follower.proc.pid)

    # a plaintext client on the external listener: the one-line TLS error, at once
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailableError) as info, Admin(zk=zk_connect, listener="external") as admin:
        admin.list_topics()
    assert time.monotonic() - started < 2.0
    assert "expects TLS" in str(info.value) and "\n" not in str(info.value), info.value
    # the command line picks a listener too
    listed = logferry(
        "topic",
        "list",
        "--zk",
        zk_connect,
        "--listener",
        "external",
        "--tls-ca",
        str(pki.ca),
        "--sasl-user",
        "alice",
        "--sasl-password-file",
        str(tmp_path / "alice.password"),
    )
    assert listed.returncode == 0 and "both" in listed.stdout, listed.stderr
    refused = logferry("topic", "list", "--zk", zk_connect, "--listener", "external")
    assert refused.returncode != 0 and "expects TLS" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    # a listener no broker has: one line naming it
    with pytest.raises(BrokerNotAvailableError, match="'nosuch'"), Admin(zk=zk_connect, listener="nosuch") as admin:
        admin.list_topics()


def test_followers_replicate_over_the_plaintext_listener_and_metrics_are_https(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, external = listener_cluster(broker_cluster, pki, 2, inter="local", metrics={"tls": broker_tls(pki)})
    start_all(cluster, monkeypatch)
    curl = shutil.which("curl")
    assert curl, "curl is missing: scripts/install-system-deps.sh installs it"
    doc = tomllib.loads(cluster.brokers[0].config_file.read_text())
    url = f"https://127.0.0.1:{doc['broker']['metrics_port']}/metrics"
    done = subprocess.run(
        [curl, "-sS", "--max-time", "10", "--cacert", str(pki.ca), url], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "logferry_" in done.stdout, done.stderr
    plain = subprocess.run(
        [curl, "-sS", "--max-time", "10", url.replace("https", "http")], capture_output=True, text=True, timeout=30
    )
    assert plain.returncode != 0  # no metrics over plain HTTP on that port
    untrusted = subprocess.run([curl, "-sS", "--max-time", "10", url], capture_output=True, text=True, timeout=30)
    assert untrusted.returncode != 0  # the certificate is checked, as ever
    assert "Traceback" not in cluster.brokers[0].log_text()
    with Admin(zk=zk_connect) as admin:
        admin.create_topic("inside", 1, 2)
    with Producer(zk=zk_connect, acks="all", linger_ms=2) as producer:
        producer.send("inside", b"x", partition=0).wait(20)
    with Admin(zk=zk_connect) as admin:
        leader = admin.cluster.partitions_for("inside")[0]
    follower = next(b for b in cluster.brokers if b.id != leader)
    leader_process = next(b for b in cluster.brokers if b.id == leader)
    assert follower.proc is not None
    assert wait_for(lambda: leader_process.port in remote_ports(follower.proc.pid))
    assert external[cluster.brokers.index(leader_process)] not in remote_ports(follower.proc.pid)


def test_a_kafka_listener_with_tls_serves_librdkafka_over_ssl(broker_cluster, pki: Pki, zk_connect: str) -> None:
    import confluent_kafka  # the dev extra, as in test_kafka_clients

    cluster = broker_cluster(0)
    process = cluster.add(start=False)
    doc = tomllib.loads(process.config_file.read_text())
    doc["broker"].pop("host")
    doc["broker"].pop("port")
    kafka_port = free_port()
    doc["listeners"] = [
        {"name": "local", "port": process.port},
        {"name": "kafka", "port": kafka_port, "protocol": "kafka", "tls": broker_tls(pki)},
    ]
    process.config_file.write_text(dumps(doc))
    process.start()
    with Admin(zk=zk_connect) as admin:
        admin.create_topic("kafka-tls", 1, 1)
    ssl_settings = {
        "bootstrap.servers": f"127.0.0.1:{kafka_port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    producer = confluent_kafka.Producer({**ssl_settings, "acks": "all"})
    producer.produce("kafka-tls", b"over tls", partition=0)
    assert producer.flush(20) == 0
    consumer = confluent_kafka.Consumer({**ssl_settings, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition("kafka-tls", 0, -2)])
        deadline, got = time.monotonic() + 20, None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got = msg.value()
    finally:
        consumer.close()
    assert got == b"over tls"
    assert "plaintext while [tls]" not in process.log_text()  # no warning: it is TLS
