"""The agent publishes over TLS with its ``[tls]`` section (a real agent process, a real
TLS broker with mutual TLS)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from broker.client import SimpleConsumer
from broker.common.tls import TlsConfig
from tests.agent.conftest import wait_until
from tests.agent.test_integration import base_doc
from tests.support.pki import make_pki

pytestmark = pytest.mark.integration


def test_the_agent_publishes_over_mutual_tls(broker_cluster, agent_process, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = broker_cluster(
        1,
        tls={
            "enabled": True,
            "cert_file": str(pki.broker_cert),
            "key_file": str(pki.broker_key),
            "ca_file": str(pki.ca),
            "client_auth": "required",
        },
    )
    tls = {"enabled": True, "ca_file": str(pki.ca), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    doc = base_doc(tmp_path, cluster.bootstrap, tls=tls)
    lines = [f"line {i}".encode() for i in range(2000)]
    (tmp_path / "logs" / "a.log").write_bytes(b"\n".join(lines) + b"\n")
    agent = agent_process(doc).start()
    wait_until(lambda: agent.counter("messages_acked") >= len(lines), 30, "acks")
    assert agent.terminate() == 0
    client = TlsConfig(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    got = []
    with SimpleConsumer(brokers=cluster.bootstrap, tls=client) as consumer:
        for partition in consumer.partitions("app"):
            got += [msgpack.unpackb(m.value)["line"].encode() for m in consumer.messages("app", partition, "earliest")]
    assert sorted(got) == sorted(lines)
