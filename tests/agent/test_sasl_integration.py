"""The agent publishes over TLS with SASL SCRAM from its ``[sasl]`` section (a real agent
process, a real broker requiring authentication, a user made with ``logferry user``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgpack
import pytest

from broker.client import SaslCredentials, SimpleConsumer
from broker.common.config import dumps
from broker.common.tls import TlsConfig
from tests.agent.conftest import wait_until
from tests.agent.test_integration import base_doc
from tests.integration.test_authentication import create_user, password_file
from tests.support.pki import make_pki

pytestmark = pytest.mark.integration


def test_the_agent_publishes_with_scram(broker_cluster, agent_process, zk_connect: str, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    create_user(zk_connect, tmp_path, "agent", "agent-password")
    cluster = broker_cluster(0)
    broker = cluster.add(
        tls={"enabled": True, "cert_file": str(pki.broker_cert), "key_file": str(pki.broker_key)}, start=False
    )
    doc = tomllib.loads(broker.config_file.read_text())
    doc["auth"] = {"required": True}
    broker.config_file.write_text(dumps(doc))
    broker.start()
    agent_doc = base_doc(
        tmp_path,
        cluster.bootstrap,
        tls={"enabled": True, "ca_file": str(pki.ca)},
        sasl={"username": "agent", "password_file": str(password_file(tmp_path, "agent", "agent-password"))},
    )
    lines = [f"line {i}".encode() for i in range(500)]
    (tmp_path / "logs" / "a.log").write_bytes(b"\n".join(lines) + b"\n")
    agent = agent_process(agent_doc).start()
    wait_until(lambda: agent.counter("messages_acked") >= len(lines), 30, "acks")
    assert agent.terminate() == 0
    assert "first connection of User:agent" in broker.log_text()
    got = []
    with SimpleConsumer(
        brokers=cluster.bootstrap, tls=TlsConfig(ca_file=pki.ca), sasl=SaslCredentials("agent", "agent-password")
    ) as consumer:
        for partition in consumer.partitions("app"):
            got += [msgpack.unpackb(m.value)["line"].encode() for m in consumer.messages("app", partition, "earliest")]
    assert sorted(got) == sorted(lines)
