"""The Apache Kafka peer's pure parts (benchmarks/peers/apache_kafka.py): its version
is the pom's (broker/testing/kafka_jars.py, where the jars are), its config binds
loopback only in KRaft combined mode, its cluster ids have Kafka's form. No JVM is
started."""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import vs_kafka
from broker.testing import kafka_jars

# vs_kafka put benchmarks/ on sys.path and imported the peer as ``peers.apache_kafka``.
apache_kafka: ModuleType = sys.modules[vs_kafka.ApacheKafka.__module__]


def test_the_version_is_the_poms() -> None:
    pom = kafka_jars.POM.read_text()
    match = re.search(r"<kafka.version>(.+)</kafka.version>", pom)
    assert match is not None
    assert match[1] == apache_kafka.KAFKA_VERSION
    assert apache_kafka.jar_dir().name == f"apache-kafka-{apache_kafka.KAFKA_VERSION}"


def test_mirrormaker2s_version_is_its_poms() -> None:
    """MirrorMaker 2's jars are a folder of their own, in the version of their own pom."""
    pom = (kafka_jars.POM.parent / "mirrormaker2" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>(.+)</kafka.version>", pom)
    assert match is not None
    assert match[1] == kafka_jars.MIRRORMAKER2_VERSION
    assert kafka_jars.jar_dir(kafka_jars.MIRRORMAKER2).name == f"apache-kafka-mirrormaker2-{match[1]}"


def test_the_node_is_kraft_combined_on_loopback_only(tmp_path: Path) -> None:
    text = apache_kafka.server_properties(9092, 9093, tmp_path / "data")
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["log.dirs"] == str(tmp_path / "data")
    # Kafka's default durability: no flush interval set anywhere.
    assert not any(key.startswith("log.flush") for key in props)


def test_cluster_ids_are_16_bytes_in_url_safe_base64() -> None:
    for _ in range(50):
        cid = apache_kafka.cluster_id()
        assert len(cid) == 22
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_a_cluster_node_names_every_voter_and_keeps_kafkas_internal_replication(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    text = apache_kafka.server_properties(9094, 9095, tmp_path / "data", node_id=2, voters=voters, nodes=3)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"


def test_a_cluster_has_at_least_one_node_and_distinct_ports() -> None:
    with pytest.raises(ValueError, match="at least 1 node, not 0"):
        apache_kafka.ApacheKafka(nodes=0)
    ports = apache_kafka.distinct_ports(6)
    assert len(set(ports)) == 6
