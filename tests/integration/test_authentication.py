"""SASL SCRAM and mutual-TLS principals against real brokers, a real ZooKeeper and real
TLS handshakes with generated certificates.

Users are created with ``logferry user create`` (a password file, never the command
line); brokers run with ``[tls]`` and ``[auth] required = true``; clients, followers and
the command line authenticate; wrong passwords, unknown users and unauthenticated
requests get one clear, non-retried error while the broker keeps serving everyone else.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from broker.client import Admin, Producer, SaslCredentials, SimpleConsumer
from broker.common.config import dumps
from broker.common.errors import AuthenticationError, AuthenticationRequiredError
from broker.common.tls import TlsConfig
from broker.testing.localrun import free_port
from tests.support.cli import logferry
from tests.support.metrics import samples, scrape, value
from tests.support.pki import Pki

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery staple"


def broker_tls(pki: Pki, **extra: object) -> dict[str, object]:
    return {
        "enabled": True,
        "ca_file": str(pki.ca),
        "cert_file": str(pki.broker_cert),
        "key_file": str(pki.broker_key),
        **extra,
    }


def password_file(directory: Path, name: str, password: str) -> Path:
    path = directory / f"{name}.password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


def create_user(zk: str, directory: Path, name: str, password: str = PASSWORD) -> None:
    done = logferry(
        "user", "create", name, "--zk", zk, "--password-file", str(password_file(directory, name, password))
    )
    assert done.returncode == 0, done.stderr
    assert password not in done.stdout + done.stderr


def secured_cluster(
    broker_cluster: Any,
    pki: Pki,
    n: int = 1,
    tls: dict[str, Any] | None = None,
    auth: dict[str, Any] | None = None,
    sasl: dict[str, Any] | None = None,
    broker: dict[str, Any] | None = None,
    zk: str | None = None,
) -> Any:
    """Brokers with ``[tls]``, ``[auth]`` (required by default) and ``[sasl]``."""
    cluster = broker_cluster(0, zk=zk)
    for _ in range(n):
        process = cluster.add(broker, tls=tls or broker_tls(pki), start=False)
        doc = tomllib.loads(process.config_file.read_text())
        doc["auth"] = auth if auth is not None else {"required": True}
        if sasl:
            doc["sasl"] = sasl
        process.config_file.write_text(dumps(doc))
        process.config_file.chmod(0o600)
        process.start()
    return cluster


def produce_consume(zk: str, tls: TlsConfig, sasl: SaslCredentials | None, topic: str, n: int = 50) -> None:
    with Producer(zk=zk, tls=tls, sasl=sasl, acks="all", linger_ms=2) as producer:
        futures = [producer.send(topic, f"m{i:04d}".encode(), partition=0) for i in range(n)]
        producer.flush()
        for future in futures:
            future.wait(10)
    expected = [f"m{i:04d}".encode() for i in range(n)]
    deadline = time.monotonic() + 10  # acknowledged, and visible once the high watermark moves
    with SimpleConsumer(zk=zk, tls=tls, sasl=sasl) as consumer:
        while True:
            values = [m.value for m in consumer.messages(topic, 0, "earliest", limit=n)]
            if values == expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert values == expected


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_produce_and_consume_as_a_scram_user(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, mechanism: str
) -> None:
    create_user(zk_connect, tmp_path, "alice")
    cluster = secured_cluster(broker_cluster, pki)
    tls = TlsConfig(ca_file=pki.ca)
    produce_consume(zk_connect, tls, SaslCredentials("alice", PASSWORD, mechanism), "scram")
    log = cluster.brokers[0].log_text()
    assert "first connection of User:alice" in log and PASSWORD not in log
    listed = logferry("user", "list", "--zk", zk_connect)
    assert listed.returncode == 0 and "alice" in listed.stdout
    assert "SCRAM-SHA-512" in listed.stdout and "salt" not in listed.stdout


@pytest.mark.parametrize("user, password", [("alice", "not the password"), ("nobody", PASSWORD)])
def test_wrong_password_or_unknown_user_is_one_clear_error(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path, user: str, password: str
) -> None:
    create_user(zk_connect, tmp_path, "alice")
    metrics_port = free_port()
    cluster = secured_cluster(broker_cluster, pki, broker={"metrics_port": metrics_port})
    tls = TlsConfig(ca_file=pki.ca)
    started = time.monotonic()
    with (
        pytest.raises(AuthenticationError) as info,
        Admin(zk=zk_connect, tls=tls, sasl=SaslCredentials(user, password)) as admin,
    ):
        admin.list_topics()
    assert time.monotonic() - started < 5  # not retried
    message = str(info.value)
    assert "unknown user or wrong password" in message and "\n" not in message, message
    assert password not in message
    produce_consume(zk_connect, tls, SaslCredentials("alice", PASSWORD), "still-served", 5)
    log = cluster.brokers[0].log_text()
    assert "authentication failed" in log and "Traceback" not in log
    metrics = samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
    assert value(metrics, "logferry_authentication_failures_total", mechanism="SCRAM-SHA-512") == 1


def test_a_request_before_authentication_is_refused(broker_cluster, pki: Pki, zk_connect: str) -> None:
    cluster = secured_cluster(broker_cluster, pki)
    with (
        pytest.raises(AuthenticationRequiredError) as info,
        Admin(brokers=cluster.bootstrap, tls=TlsConfig(ca_file=pki.ca)) as admin,
    ):
        admin.list_topics()
    assert "requires authentication" in str(info.value)


def test_a_deleted_user_can_no_longer_log_in(broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path) -> None:
    create_user(zk_connect, tmp_path, "temp")
    secured_cluster(broker_cluster, pki, auth={"required": True, "credential_cache_s": 0})
    tls, creds = TlsConfig(ca_file=pki.ca), SaslCredentials("temp", PASSWORD)
    with Admin(zk=zk_connect, tls=tls, sasl=creds) as admin:
        admin.list_topics()
    assert logferry("user", "delete", "temp", "--zk", zk_connect).returncode == 0
    with pytest.raises(AuthenticationError), Admin(zk=zk_connect, tls=tls, sasl=creds) as admin:
        admin.list_topics()


def test_followers_authenticate_to_their_leaders(broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path) -> None:
    create_user(zk_connect, tmp_path, "alice")
    create_user(zk_connect, tmp_path, "broker", "broker-secret")
    cluster = secured_cluster(
        broker_cluster,
        pki,
        n=2,
        sasl={
            "username": "broker",
            "mechanism": "SCRAM-SHA-256",
            "password_file": str(password_file(tmp_path, "broker", "broker-secret")),
        },
    )
    tls, alice = TlsConfig(ca_file=pki.ca), SaslCredentials("alice", PASSWORD)
    with Admin(zk=zk_connect, tls=tls, sasl=alice) as admin:
        admin.create_topic("replicated", 1, 2)
    produce_consume(zk_connect, tls, alice, "replicated", 200)  # acks=all needs the follower
    with Admin(zk=zk_connect, tls=tls, sasl=alice) as admin:
        deadline = time.monotonic() + 15
        while sorted(admin.describe_partitions("replicated")[0].isr) != [1, 2]:
            assert time.monotonic() < deadline, admin.describe_partitions("replicated")
            time.sleep(0.2)
    assert any("first connection of User:broker" in b.log_text() for b in cluster.brokers)


def test_mutual_tls_principal_is_the_certificate_subject(broker_cluster, pki: Pki, zk_connect: str) -> None:
    cluster = secured_cluster(
        broker_cluster, pki, tls=broker_tls(pki, client_auth="required"), auth={"mechanisms": [], "required": True}
    )
    tls = TlsConfig(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    produce_consume(zk_connect, tls, None, "mtls", 10)
    log = cluster.brokers[0].log_text()
    assert "first connection of User:CN=client,O=logferry" in log, log


def test_the_command_line_with_a_password_file(broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path) -> None:
    create_user(zk_connect, tmp_path, "cli-user")
    secured_cluster(broker_cluster, pki)
    secret = password_file(tmp_path, "cli", PASSWORD)
    common = [
        "--zk",
        zk_connect,
        "--tls-ca",
        str(pki.ca),
        "--sasl-user",
        "cli-user",
        "--sasl-password-file",
        str(secret),
    ]
    done = logferry("produce", "cli-topic", "--acks", "all", *common, stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    done = logferry("consume", "cli-topic", "-n", "2", *common)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["one", "two"]
    done = logferry(
        "consume",
        "cli-topic",
        "-n",
        "2",
        "--zk",
        zk_connect,
        "--tls-ca",
        str(pki.ca),
        "--sasl-user",
        "cli-user",
        "--sasl-password-env",
        "CLI_PW",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        env={"CLI_PW": "wrong"},
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown user or wrong password" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_authenticated_principals_are_what_acls_decide_on(
    broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path
) -> None:
    from broker.common.errors import TopicAuthorizationFailedError

    for name in ("admin", "alice", "bob"):
        create_user(zk_connect, tmp_path, name)
    cluster = broker_cluster(0)
    process = cluster.add({"num_partitions": 1}, tls=broker_tls(pki), start=False)
    doc = tomllib.loads(process.config_file.read_text())
    doc.update(auth={"required": True}, authorizer={"enabled": True, "super_users": ["User:admin"]})
    process.config_file.write_text(dumps(doc))
    process.start()
    done = logferry(
        "acl",
        "add",
        "--zk",
        zk_connect,
        "--principal",
        "User:alice",
        "--operation",
        "produce",
        "--operation",
        "consume",
        "--topic",
        "owned",
        "--allow",
    )
    assert done.returncode == 0, done.stderr
    tls = TlsConfig(ca_file=pki.ca)
    with Admin(zk=zk_connect, tls=tls, sasl=SaslCredentials("admin", PASSWORD)) as admin:
        admin.create_topic("owned", 1, 1)
    produce_consume(zk_connect, tls, SaslCredentials("alice", PASSWORD), "owned", 5)
    with (
        pytest.raises(TopicAuthorizationFailedError, match="User:bob may not (describe|produce)"),
        Producer(zk=zk_connect, tls=tls, sasl=SaslCredentials("bob", PASSWORD), acks=1, linger_ms=0) as producer,
    ):
        producer.send("owned", b"x", partition=0).wait(20)


def test_the_mirror_authenticates_to_both_clusters(broker_cluster, zookeeper, pki: Pki, tmp_path: Path) -> None:
    from tests.mirror.conftest import MirrorProcess

    source_zk, target_zk = zookeeper.new_chroot(), zookeeper.new_chroot()
    for zk in (source_zk, target_zk):
        create_user(zk, tmp_path, "mirror", "mirror-password")
    create_user(source_zk, tmp_path, "alice")
    secured_cluster(broker_cluster, pki, zk=source_zk)
    secured_cluster(broker_cluster, pki, zk=target_zk)
    secret = str(password_file(tmp_path, "mirror", "mirror-password"))
    client = {"tls": {"enabled": True, "ca_file": str(pki.ca)}, "sasl": {"username": "mirror", "password_file": secret}}
    tls = TlsConfig(ca_file=pki.ca)
    with Admin(zk=source_zk, tls=tls, sasl=SaslCredentials("alice", PASSWORD)) as admin:
        admin.create_topic("crossing", 1, 1)
    mirror = MirrorProcess(
        tmp_path,
        "m",
        {
            "source": {"zk_connect": source_zk, **client},
            "target": {"zk_connect": target_zk, **client},
            "mirror": {
                "topics": ["crossing"],
                "commit_interval_ms": 300,
                "session_timeout_s": 4.0,
                "shutdown_timeout_s": 20.0,
            },
            "metrics": {},
        },
    ).start()
    try:
        produce_consume(source_zk, tls, SaslCredentials("alice", PASSWORD), "crossing", 100)
        mirror_creds = SaslCredentials("mirror", "mirror-password")
        deadline = time.monotonic() + 60
        values: list[bytes] = []
        while len(values) < 100:
            assert time.monotonic() < deadline, (len(values), mirror.log_tail())
            assert mirror.alive(), mirror.log_tail()
            time.sleep(0.5)
            try:
                with SimpleConsumer(zk=target_zk, tls=tls, sasl=mirror_creds) as consumer:
                    values = [m.value for m in consumer.messages("crossing", 0, "earliest", limit=100, follow=False)]
            except AuthenticationError:
                raise
            except Exception as exc:  # noqa: BLE001 - unknown topic until the mirror makes it
                if "topic" not in str(exc).lower() and "broker" not in str(exc).lower():
                    raise
        assert values == [f"m{i:04d}".encode() for i in range(100)]
        assert mirror.terminate() == 0, mirror.log_tail()
    finally:
        if mirror.alive():
            mirror.kill()
