"""TLS on the broker's data port, against real handshakes with generated certificates.

Brokers run with a ``[tls]`` section (certificates from ``broker.common.certs``); clients,
followers fetching from their leaders and the command line talk TLS; the wrong kinds of
client (plaintext on a TLS port, TLS on a plaintext port, an untrusted CA, a wrong host
name, a client that never finishes its handshake) get a clear one-line error quickly
while the broker keeps serving everyone else and logs nothing above DEBUG about them.

The tests that neither read a broker's log nor need other TLS settings share the
module's TLS broker (``module_cluster``), each with its own topics.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.common.errors import BrokerNotAvailableError, TlsHandshakeError
from broker.common.tls import TlsConfig
from tests.support.cli import logferry
from tests.support.pki import Pki

pytestmark = pytest.mark.integration


def broker_tls(pki: Pki, **extra: object) -> dict[str, object]:
    return {
        "enabled": True,
        "ca_file": str(pki.ca),
        "cert_file": str(pki.broker_cert),
        "key_file": str(pki.broker_key),
        **extra,
    }


@pytest.fixture(scope="module")
def module_cluster_options(pki: Pki) -> dict[str, Any]:
    """The module's shared broker speaks TLS, with ``broker_tls(pki)``."""
    return {"tls": broker_tls(pki)}


def _noisy_lines(log: str) -> list[str]:
    """Broker log lines above DEBUG that mention TLS or SSL or a traceback."""
    return [
        line
        for line in log.splitlines()
        if any(w in line for w in ("SSL", "ssl", "TLS", "Traceback", "handshake"))
        and " DEBUG " not in line
        and "listening on" not in line
    ]


def _produce_consume(zk: str, tls: TlsConfig, topic: str, n: int) -> None:
    with Producer(zk=zk, tls=tls, acks="all", linger_ms=2) as producer:
        futures = [producer.send(topic, f"m{i:05d}".encode(), partition=0) for i in range(n)]
        producer.flush()
        for future in futures:
            future.wait(10)
    with SimpleConsumer(zk=zk, tls=tls) as consumer:
        # an acknowledgement confirms the append, not visibility (docs/client.md): wait
        # for the fsync that makes the messages visible
        values = [m.value for m in consumer.messages(topic, 0, "earliest", follow=True, limit=n, timeout=10)]
    assert values == [f"m{i:05d}".encode() for i in range(n)]


def test_replicated_topic_over_tls_in_order(broker_cluster, pki: Pki) -> None:
    cluster = broker_cluster(2, tls=broker_tls(pki))
    tls = TlsConfig(ca_file=pki.ca)
    with Admin(zk=cluster.zk_connect, tls=tls) as admin:
        admin.create_topic("secure", 1, 2)
    _produce_consume(cluster.zk_connect, tls, "secure", 2000)
    # acks=all needed the follower: it fetched from its leader over TLS
    with Admin(zk=cluster.zk_connect, tls=tls) as admin:
        deadline = time.monotonic() + 15
        while sorted(admin.describe_partitions("secure")[0].isr) != [1, 2]:
            assert time.monotonic() < deadline, admin.describe_partitions("secure")
            time.sleep(0.2)
    for broker in cluster.brokers:
        assert not _noisy_lines(broker.log_text()), broker.log_tail()


def test_mutual_tls_refuses_a_client_without_a_certificate(broker_cluster, pki: Pki) -> None:
    cluster = broker_cluster(1, tls=broker_tls(pki, client_auth="required"))
    with_cert = TlsConfig(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    _produce_consume(cluster.zk_connect, with_cert, "mtls", 10)
    started = time.monotonic()
    with (
        pytest.raises(BrokerNotAvailableError) as info,
        Admin(zk=cluster.zk_connect, tls=TlsConfig(ca_file=pki.ca), request_timeout=5) as admin,
    ):
        admin.list_topics()
    assert time.monotonic() - started < 5
    assert "\n" not in str(info.value) and "certificate" in str(info.value).lower()


def test_a_plaintext_client_on_a_tls_port_fails_fast_with_one_line(broker_cluster, pki: Pki) -> None:
    cluster = broker_cluster(1, tls=broker_tls(pki))
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailableError) as info, Admin(brokers=cluster.bootstrap) as admin:
        admin.list_topics()
    assert time.monotonic() - started < 1.0
    message = str(info.value)
    assert "expects TLS" in message and "\n" not in message, message
    _produce_consume(cluster.zk_connect, TlsConfig(ca_file=pki.ca), "still-serving", 10)
    assert not _noisy_lines(cluster.brokers[0].log_text()), cluster.brokers[0].log_tail()


def test_a_tls_client_on_a_plaintext_port_fails_fast_with_one_line(broker_cluster) -> None:
    cluster = broker_cluster(1)
    started = time.monotonic()
    with pytest.raises(BrokerNotAvailableError) as info, Admin(brokers=cluster.bootstrap, tls=TlsConfig()) as admin:
        admin.list_topics()
    assert time.monotonic() - started < 1.0
    message = str(info.value)
    assert "TLS" in message and "\n" not in message, message
    with Admin(brokers=cluster.bootstrap) as admin:  # plaintext clients still served
        admin.create_topic("plain", 1, 1)
    log = cluster.brokers[0].log_text()
    assert not [line for line in log.splitlines() if "closing connection" in line and " DEBUG " not in line], log


@pytest.mark.parametrize("case", ["untrusted CA", "wrong host name"])
def test_verification_failures_are_clear(module_cluster, pki: Pki, case: str) -> None:
    cluster = module_cluster
    tls = (
        TlsConfig(ca_file=pki.other_ca)
        if case == "untrusted CA"
        else TlsConfig(ca_file=pki.ca, server_hostname="not-the-broker.example")
    )
    with pytest.raises(TlsHandshakeError) as info, Admin(brokers=cluster.bootstrap, tls=tls) as admin:
        admin.list_topics()
    message = str(info.value)
    assert "certificate did not verify" in message and "\n" not in message, message
    if case == "wrong host name":
        assert "not-the-broker.example" in message


def test_a_client_that_never_speaks_is_dropped(broker_cluster, pki: Pki) -> None:
    cluster = broker_cluster(1, tls=broker_tls(pki, handshake_timeout_s=1.0))
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", cluster.brokers[0].port), timeout=10) as sock:
        try:
            data = sock.recv(1)
        except ConnectionResetError:
            data = b""
    assert data == b"" and time.monotonic() - started < 5, time.monotonic() - started
    _produce_consume(cluster.zk_connect, TlsConfig(ca_file=pki.ca), "after-silence", 10)


_cli = logferry


def test_cli_produce_and_consume_over_tls(module_cluster, unique_name: Callable[[str], str], pki: Pki) -> None:
    zk = module_cluster.zk_connect
    topic = unique_name("cli-tls")
    tls = ["--tls-ca", str(pki.ca)]
    assert _cli("topic", "create", topic, "-p", "1", *tls, zk=zk).returncode == 0
    lines = "".join(f"line {i}\n" for i in range(100))
    produced = _cli("produce", topic, *tls, zk=zk, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = _cli("consume", topic, "-n", "100", *tls, zk=zk)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines
    untrusted = _cli("topic", "list", "--tls-ca", str(pki.other_ca), zk=zk)
    assert untrusted.returncode == 1
    assert untrusted.stderr.startswith("logferry topic list: error: TLS handshake")
    assert "Traceback" not in untrusted.stderr and len(untrusted.stderr.splitlines()) == 1
    missing = _cli("topic", "list", "--tls-ca", str(Path(pki.ca).parent / "nope.pem"), zk=zk)
    assert missing.returncode == 2
    assert "--tls-ca: " in missing.stderr and "nope.pem: no such file" in missing.stderr


def test_the_mirror_crosses_clusters_over_tls(broker_cluster, zookeeper, pki: Pki, tmp_path: Path) -> None:
    from tests.mirror.conftest import MirrorProcess

    source = broker_cluster(1, tls=broker_tls(pki), zk=zookeeper.new_chroot())
    target = broker_cluster(1, tls=broker_tls(pki, client_auth="required"), zk=zookeeper.new_chroot())
    client_tls = {"enabled": True, "ca_file": str(pki.ca)}
    with Admin(zk=source.zk_connect, tls=TlsConfig(ca_file=pki.ca)) as admin:
        admin.create_topic("crossing", 1, 1)
    mirror = MirrorProcess(
        tmp_path,
        "m",
        {
            "source": {"zk_connect": source.zk_connect, "tls": client_tls},
            "target": {
                "zk_connect": target.zk_connect,
                "tls": {**client_tls, "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)},
            },
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
        _produce_consume(source.zk_connect, TlsConfig(ca_file=pki.ca), "crossing", 500)
        target_tls = TlsConfig(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
        deadline = time.monotonic() + 60
        values: list[bytes] = []
        while len(values) < 500:
            assert time.monotonic() < deadline, (len(values), mirror.log_tail())
            assert mirror.alive(), mirror.log_tail()
            time.sleep(0.5)
            try:
                with SimpleConsumer(zk=target.zk_connect, tls=target_tls) as consumer:
                    values = [m.value for m in consumer.messages("crossing", 0, "earliest", limit=500, follow=False)]
            except BrokerNotAvailableError:
                continue  # the topic is not there yet
            except Exception as exc:  # noqa: BLE001 - unknown topic until the mirror makes it
                if "topic" not in str(exc).lower():
                    raise
        assert values == [f"m{i:05d}".encode() for i in range(500)]
        assert mirror.terminate() == 0, mirror.log_tail()
    finally:
        if mirror.alive():
            mirror.kill()


def test_a_tls_client_that_never_reads_its_fetches_is_bounded(broker_cluster, pki: Pki) -> None:
    """Fetch answers under TLS are read from the segment and written by the broker (no
    sendfile): a client that pipelines 1 MiB fetches and never reads them must not make
    the broker read and buffer them all (200 MiB here); the send waits until the
    connection's writing resumes, and other clients are served meanwhile."""
    import ssl

    from broker.wire import protocol
    from tests.support.memory import RssSampler, rss_bytes

    MiB = 1 << 20

    cluster = broker_cluster(1, tls=broker_tls(pki), broker={"max_unsent_bytes_per_connection": 4 * MiB})
    pid = cluster.brokers[0].proc.pid
    tls = TlsConfig(ca_file=pki.ca)
    with Producer(zk=cluster.zk_connect, tls=tls, acks=1, linger_ms=5) as producer:
        for i in range(64):  # 4 MiB in 64 KiB messages
            producer.send("bulk", bytes([i]) * 65536, partition=0)
        producer.flush()
    time.sleep(0.5)
    baseline = rss_bytes(pid)
    sampler = RssSampler(pid)
    context = ssl.create_default_context(cafile=str(pki.ca))
    raw = socket.create_connection(("127.0.0.1", cluster.brokers[0].port), timeout=10)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    attacker = context.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        for corr in range(200):  # 200 fetches of up to 1 MiB each, never read
            attacker.sendall(
                protocol.encode_request(
                    protocol.FETCH, corr, {"max_wait_ms": 0, "min_bytes": 0, "parts": [["bulk", 0, 0, MiB]]}
                )
            )
        time.sleep(3.0)
        _produce_consume(cluster.zk_connect, tls, "meanwhile", 20)
        peak = sampler.stop()
        print(f"\nnever-reading TLS fetcher: broker RSS {baseline / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB")
        assert peak - baseline < 60 * MiB, (baseline, peak)
    finally:
        attacker.close()
