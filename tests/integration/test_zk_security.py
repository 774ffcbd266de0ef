"""ZooKeeper ACLs and TLS to ZooKeeper, against a real ZooKeeper and real brokers.

Brokers log in to ZooKeeper with the cluster's digest identity (``[zookeeper]``), so
every znode they and the admin tools create carries the ACLs of
``broker.coordination.zk_acl``: an unauthenticated client reads broker registrations
and topics and nothing else, and writes nothing; group clients log in with the
consumers' identity to commit offsets. ``logferry zk secure`` puts the ACLs on a
cluster that ran without them. TLS: a broker and the CLI reach ZooKeeper over its
``secureClientPort``; a plaintext client there gets one clear line.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker.client import GroupConsumer, Producer, SimpleConsumer
from broker.common.config import dumps
from broker.common.tls import TlsConfig
from broker.common.zk_security import ZkSecurity, ZkTarget, digest_id
from broker.coordination.zk_acl import WORLD_READ, digest_acl
from tests.support.cli import logferry

pytestmark = pytest.mark.integration

OWNER, OWNER_PW = "logferry", "owner-secret"
CONSUMERS, CONSUMERS_PW = "consumers", "consumers-secret"


def _secrets(tmp_path: Path) -> tuple[Path, Path]:
    owner, consumers = tmp_path / "zk-owner.password", tmp_path / "zk-consumers.password"
    owner.write_text(OWNER_PW + "\n")
    consumers.write_text(CONSUMERS_PW + "\n")
    return owner, consumers


def _zookeeper_table(owner_file: Path, **extra: object) -> dict[str, object]:
    return {
        "user": OWNER,
        "password_file": str(owner_file),
        "consumer_ids": [digest_id(CONSUMERS, CONSUMERS_PW)],
        **extra,
    }


def _start(cluster, table: dict[str, object], **broker: object):
    process = cluster.add({"num_partitions": 1, **broker}, start=False)
    process.config_file.write_text(process.config_file.read_text() + "\n" + dumps({"zookeeper": table}))
    return process.start()


def _kazoo(connect: str, auth: tuple[str, str] | None = None, **kwargs: object) -> KazooClient:
    client = KazooClient(
        hosts=connect, timeout=10.0, **kwargs, auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None
    )
    client.start(timeout=15)
    return client


_cli = logferry


def _produce(zk: str, topic: str, values: list[bytes], **kwargs: object) -> None:
    with Producer(zk=zk, **{"acks": 1, "linger_ms": 0, "retries": 5, **kwargs}) as producer:
        for future in [producer.send(topic, v, partition=0) for v in values]:
            future.wait(20)


def _consume(zk: str, topic: str, n: int, **kwargs: object) -> list[bytes]:
    with SimpleConsumer(zk=zk, **kwargs) as consumer:
        return [m.value for m in consumer.messages(topic, 0, "earliest", follow=True, limit=n, timeout=15)]


def test_secured_cluster_world_reads_public_znodes_and_writes_none(
    broker_cluster, zk_connect: str, tmp_path: Path
) -> None:
    owner_file, _ = _secrets(tmp_path)
    zk = zk_connect + "/secured"  # created by the broker, so with its ACL
    cluster = broker_cluster(0, zk=zk)
    _start(cluster, _zookeeper_table(owner_file))
    # producers and consumers need no ZooKeeper login: registrations are public (acks=all:
    # the idempotent producer's id comes from a block the broker keeps in ZooKeeper)
    _produce(zk, "web", [b"a"], acks="all")
    _produce(zk, "web", [b"b"])
    assert _consume(zk, "web", 2) == [b"a", b"b"]
    added = _cli(
        "acl",
        "add",
        "--zk",
        zk,
        "--zk-user",
        OWNER,
        "--zk-password-file",
        str(owner_file),
        "--principal",
        "User:mirror",
        "--operation",
        "consume",
        "--topic",
        "web",
        "--allow",
    )
    assert added.returncode == 0, added.stderr

    anon = _kazoo(zk)
    try:
        assert anon.get_children("/brokers/ids") == ["1"]
        assert b"partitions" in anon.get("/brokers/topics/web")[0]
        anon.get("/brokers/topics/web/partitions/0/state")
        for read in ("/acls", "/controller", "/consumers"):
            with pytest.raises(NoAuthError):
                anon.get_children(read)
        for path in ("/x", "/brokers/ids/9", "/brokers/topics/evil", "/acls/evil", "/consumers/g"):
            with pytest.raises(NoAuthError):
                anon.create(path, b"")
        for path in ("/brokers/topics/web", "/controller"):
            with pytest.raises(NoAuthError):
                anon.set(path, b"{}")
        with pytest.raises(NoAuthError):
            anon.delete("/brokers/topics/web/partitions/0/state")
        world, owner = anon.get_acls("/brokers/ids/1")[0]
        # ZooKeeper masks the hash for a reader without ADMIN ("logferry:x")
        assert world == WORLD_READ and owner.perms == digest_acl("u:h").perms
        assert (owner.id.scheme, owner.id.id.partition(":")[0]) == ("digest", OWNER)
    finally:
        anon.stop()
        anon.close()

    admin = _kazoo(zk, (OWNER, OWNER_PW))
    try:
        assert len(admin.get_children("/acls")) == 1
        admin.create("/admin/probe", b"x", makepath=True)
        admin.delete("/admin/probe")
    finally:
        admin.stop()
        admin.close()
    listed = _cli("acl", "list", "--zk", zk, "--zk-user", OWNER, "--zk-password-file", str(owner_file))
    assert listed.returncode == 0 and "User:mirror" in listed.stdout, listed.stderr
    user = _cli(
        "user",
        "create",
        "alice",
        "--password-file",
        str(owner_file),
        "--zk",
        zk,
        "--zk-user",
        OWNER,
        "--zk-password-file",
        str(owner_file),
    )
    assert user.returncode == 0, user.stderr
    credentials = _kazoo(zk)
    try:  # SCRAM credentials (/config/users) are the owner's only
        with pytest.raises(NoAuthError):
            credentials.get_children("/config/users")
        with pytest.raises(NoAuthError):
            credentials.get("/config/users/alice")
    finally:
        credentials.stop()
        credentials.close()
    refused = _cli("acl", "list", "--zk", zk)
    assert refused.returncode == 1 and "NoAuth" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_group_offsets_are_written_by_the_consumers_identity_only(
    broker_cluster, zk_connect: str, tmp_path: Path
) -> None:
    owner_file, _ = _secrets(tmp_path)
    zk = zk_connect + "/secured"
    cluster = broker_cluster(0, zk=zk)
    _start(cluster, _zookeeper_table(owner_file))
    _produce(zk, "web", [b"m1", b"m2", b"m3"])

    member_zk = ZkTarget(zk, ZkSecurity(user=CONSUMERS, password=CONSUMERS_PW))
    consumer = GroupConsumer("dash", ["web"], zk=member_zk, auto_commit_ms=0, iter_timeout=5.0)
    assert [m.value for m in consumer] == [b"m1", b"m2", b"m3"]
    consumer.close()  # commits what was processed
    offset_path = "/consumers/dash/offsets/web/0"

    anon = _kazoo(zk)
    try:
        with pytest.raises(NoAuthError):
            anon.set(offset_path, b"0")
        with pytest.raises(NoAuthError):
            anon.get(offset_path)
        with pytest.raises(NoAuthError):
            anon.delete(offset_path)
    finally:
        anon.stop()
        anon.close()
    member = _kazoo(zk, (CONSUMERS, CONSUMERS_PW))
    try:
        raw, _ = member.get(offset_path)
        assert raw
        acl, _ = member.get_acls(offset_path)
        assert sorted(a.id.id for a in acl) == sorted([digest_id(OWNER, OWNER_PW), digest_id(CONSUMERS, CONSUMERS_PW)])
    finally:
        member.stop()
        member.close()


def test_zk_secure_puts_acls_on_an_existing_cluster_and_is_idempotent(
    broker_cluster, zk_connect: str, tmp_path: Path
) -> None:
    owner_file, _ = _secrets(tmp_path)
    zk = zk_connect
    cluster = broker_cluster(1, zk=zk)  # no [zookeeper]: every znode open
    _produce(zk, "web", [b"before"])
    cluster.brokers[0].stop()

    args = (
        "zk",
        "secure",
        "--zk",
        zk,
        "--zk-user",
        OWNER,
        "--zk-password-file",
        str(owner_file),
        "--consumer-id",
        digest_id(CONSUMERS, CONSUMERS_PW),
    )
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    assert " 0 changed" not in first.stdout
    second = _cli(*args)
    assert second.returncode == 0 and " 0 changed" in second.stdout, second.stdout + second.stderr

    anon = _kazoo(zk)
    try:
        for path in ("/x", "/brokers/topics/evil", "/consumers/g"):
            with pytest.raises(NoAuthError):
                anon.create(path, b"")
        with pytest.raises(NoAuthError):
            anon.set("/brokers/topics/web", b"{}")
        anon.get("/brokers/topics/web")
    finally:
        anon.stop()
        anon.close()

    # the brokers come back with the owner's login and serve as before
    restarted = cluster.brokers[0]
    restarted.config_file.write_text(
        restarted.config_file.read_text() + "\n" + dumps({"zookeeper": _zookeeper_table(owner_file)})
    )
    restarted.start()
    _produce(zk, "web", [b"after"])
    assert _consume(zk, "web", 2) == [b"before", b"after"]

    wrong = tmp_path / "wrong.password"
    wrong.write_text("nope\n")
    refused = _cli("zk", "secure", "--zk", zk, "--zk-user", OWNER, "--zk-password-file", str(wrong))
    assert refused.returncode == 1 and "another identity" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr


def test_broker_and_cli_reach_zookeeper_over_tls(broker_cluster, tls_zookeeper, tmp_path: Path) -> None:
    server, pki = tls_zookeeper
    assert server.secure_hosts is not None
    zk = f"{server.secure_hosts}/tls-{tmp_path.name[-12:]}".replace("[", "").replace("]", "")
    owner_file, _ = _secrets(tmp_path)
    tls_table = {"enabled": True, "ca_file": str(pki.ca)}
    cluster = broker_cluster(0, zk=zk)
    _start(cluster, _zookeeper_table(owner_file, tls=tls_table))

    target = ZkTarget(zk, ZkSecurity(tls=TlsConfig(ca_file=pki.ca)))
    _produce(target, "web", [b"over-tls"])
    assert _consume(target, "web", 1) == [b"over-tls"]
    listed = _cli("topic", "list", "--zk", zk, "--zk-tls-ca", str(pki.ca))
    assert listed.returncode == 0 and "web" in listed.stdout, listed.stderr

    began = time.monotonic()
    plain = _cli("topic", "list", "--zk", zk)
    assert plain.returncode != 0
    lines = plain.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in plain.stderr, plain.stderr
    assert "cannot reach ZooKeeper" in lines[0] and "--zk-tls-ca" in lines[0]
    assert time.monotonic() - began < 30


def test_zk_start_tls_serves_a_secure_port_with_a_certificate_it_made(tmp_path: Path) -> None:
    from broker.testing.localrun import free_port

    data_dir, port, secure_port = tmp_path / "zk", free_port(), free_port()
    common = ("--data-dir", str(data_dir))
    started = _cli("zk", "start", *common, "--port", str(port), "--tls", "--secure-port", str(secure_port), timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        assert f"TLS: 127.0.0.1:{secure_port}" in started.stdout
        ca = data_dir / "tls" / "ca.pem"
        assert (data_dir / "tls" / "zookeeper.key").stat().st_mode & 0o777 == 0o600
        status = _cli("zk", "status", *common)
        assert status.returncode == 0 and f"TLS address: 127.0.0.1:{secure_port}" in status.stdout
        client = _kazoo(f"127.0.0.1:{secure_port}", use_ssl=True, ca=str(ca), verify_certs=True, check_hostname=True)
        try:
            assert "zookeeper" in client.get_children("/")
        finally:
            client.stop()
            client.close()
    finally:
        stopped = _cli("zk", "stop", *common)
        assert stopped.returncode == 0, stopped.stderr


def test_a_secured_session_gives_each_znode_its_acl_in_transactions_too(zk_connect: str) -> None:
    from broker.coordination import zk as zkmod

    security = ZkSecurity(user=OWNER, password=OWNER_PW, consumer_ids=(digest_id(CONSUMERS, CONSUMERS_PW),))
    client = zkmod.connect(zk_connect + "/tx", create=True, security=security)
    try:
        tx = client.transaction()
        tx.create("/brokers/topics/t")
        tx.create("/acls")
        tx.create("/consumers/g")
        assert all(r is True or isinstance(r, str) for r in tx.commit())
        owner = digest_acl(digest_id(OWNER, OWNER_PW))
        consumers = digest_acl(digest_id(CONSUMERS, CONSUMERS_PW))
        assert client.get_acls("/")[0] == [WORLD_READ, owner]
        assert client.get_acls("/brokers/topics/t")[0] == [WORLD_READ, owner]
        assert client.get_acls("/acls")[0] == [owner]
        assert client.get_acls("/consumers/g")[0] == [owner, consumers]
    finally:
        zkmod.close(client)


def test_zookeeper_requiring_client_certificates_takes_ours_and_refuses_none(tmp_path: Path) -> None:
    from broker.common.errors import ZooKeeperError
    from broker.coordination import zk as zkmod
    from broker.testing.zkserver import ServerTls
    from tests.support.pki import make_pki
    from tests.support.zookeeper import start_session_zookeeper

    pki = make_pki(tmp_path / "pki")
    server = start_session_zookeeper(
        tmp_path, ServerTls(1, pki.broker_cert, pki.broker_key, pki.ca, client_auth="required")
    )
    try:
        assert server.secure_hosts is not None
        mutual = ZkSecurity(tls=TlsConfig(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key))
        # a fresh JVM on a busy machine: its first TLS handshake may take seconds
        client = zkmod.connect(server.secure_hosts + "/m", create=True, security=mutual, timeout=30)
        zkmod.close(client)
        with pytest.raises(ZooKeeperError, match="over TLS"):
            zkmod.connect(
                server.secure_hosts + "/m", create=False, timeout=2, security=ZkSecurity(tls=TlsConfig(ca_file=pki.ca))
            )
    finally:
        server.stop()
