"""DescribeConfigs on the Kafka listener, asked by Kafka admin clients nobody here wrote
(confluent-kafka's AdminClient, kafka-python's KafkaAdminClient) against a real broker
and a real ZooKeeper: a topic's own settings (set by the native admin) over the
broker's, under Kafka's names."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from broker.client import Admin

pytestmark = pytest.mark.integration


def test_admin_clients_describe_topic_and_broker_configs(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(1, min_insync_replicas=1)
    with Admin(brokers=cluster.native) as admin:
        admin.create_topic("described", 2, 1, config={"retention_ms": 60_000, "compression": "zstd"})
        admin.create_topic("defaults", 1, 1)

    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    asked = [
        ConfigResource(ConfigResource.Type.TOPIC, "described"),
        ConfigResource(ConfigResource.Type.TOPIC, "defaults"),
        ConfigResource(ConfigResource.Type.BROKER, "1"),
    ]
    futures = client.describe_configs(asked, request_timeout=20)
    described, defaults, broker = (futures[r].result(timeout=30) for r in asked)
    assert described["retention.ms"].value == "60000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["compression.type"].value == "zstd"
    assert described["cleanup.policy"].value == "delete"
    assert defaults["retention.ms"].value == str(168 * 3600 * 1000)
    assert defaults["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert defaults["compression.type"].value == "producer"
    assert broker["broker.id"].value == "1"
    assert broker["num.partitions"].value == "4"  # the test brokers' setting

    # a change through the native admin shows once the broker's ZooKeeper watch saw it
    with Admin(brokers=cluster.native) as admin:
        admin.alter_topic("defaults", {"segment_bytes": 4096})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "defaults")
    deadline = time.monotonic() + 15
    while True:
        changed = client.describe_configs([resource])[resource].result(timeout=30)
        if changed["segment.bytes"].value == "4096" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert changed["segment.bytes"].value == "4096"
    assert changed["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(Exception, match="(?i)unknown topic"):
        client.describe_configs([missing])[missing].result(timeout=30)

    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        answers = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, "described")])
    finally:
        kp.close()
    text = repr(answers)
    assert "retention.ms" in text and "60000" in text and "zstd" in text
    assert "Traceback" not in cluster.brokers[0].log_text()
