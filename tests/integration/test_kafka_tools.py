"""More Kafka clients nobody here wrote against the Kafka listener: Debian's `kcat`
(librdkafka's command line; scripts/install-system-deps.sh installs it) and `aiokafka`
(its own pure-Python protocol implementation, the dev extra).

The one-broker tests share the module's broker (``module_kafka_cluster``), each with its own topic."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.support.brokers import KAFKA_LISTENER, KafkaCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_cluster_options() -> dict[str, Any]:
    """The broker the module's tests share speaks Kafka too, as ``kafka_cluster(1)``'s."""
    return {"kafka": KAFKA_LISTENER}


N = 300


def kcat(*args: str, stdin: str | None = None, timeout: float = 60) -> str:
    """Run kcat; fail (not skip) when it is missing: the install script provides it."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail(
            "kcat is not installed: run scripts/install-system-deps.sh as root (it installs Debian's `kcat` package)"
        )
    result = subprocess.run([path, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"kcat {' '.join(args)} failed: {result.stderr}"
    return result.stdout


def test_kcat_lists_the_cluster(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(2)
    cluster.create_topic("listed", 3, rf=2)
    meta = json.loads(kcat("-b", cluster.bootstrap, "-L", "-J"))
    brokers = {b["id"]: b["name"] for b in meta["brokers"]}
    assert brokers == {i + 1: b.kafka_address() for i, b in enumerate(cluster.brokers)}
    topic = next(t for t in meta["topics"] if t["topic"] == "listed")
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    for p in topic["partitions"]:
        assert p["leader"] in brokers
        assert sorted(r["id"] for r in p["replicas"]) == [1, 2]
        assert sorted(r["id"] for r in p["isrs"]) == [1, 2]
    text = kcat("-b", cluster.bootstrap, "-L")  # the human form a user reads
    assert "2 brokers:" in text and 'topic "listed" with 3 partitions:' in text


def test_kcat_produces_and_consumes_n_keyed_messages(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    kc = unique_name("kc")
    cluster.create_topic(kc, 2)
    for p in range(2):
        lines = "".join(f"k{i % 5}|v{i}\n" for i in range(N) if i % 2 == p)
        kcat("-b", cluster.bootstrap, "-P", "-t", kc, "-p", str(p), "-K", "|", "-X", "acks=all", stdin=lines)
    out = kcat("-b", cluster.bootstrap, "-C", "-t", kc, "-o", "beginning", "-e", "-J", "-q")
    got = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(got) == N
    for p in range(2):
        mine = [m for m in got if m["partition"] == p]
        values = [int(m["payload"][1:]) for m in mine]
        assert values == [i for i in range(N) if i % 2 == p], f"partition {p} out of order"
        assert all(m["key"] == f"k{int(m['payload'][1:]) % 5}" for m in mine)
        offsets = [m["offset"] for m in mine]
        assert offsets == list(range(len(values)))  # message offsets


def test_aiokafka_produces_and_consumes_n_in_order(
    module_kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = module_kafka_cluster
    aio = unique_name("aio")
    cluster.create_topic(aio, 3)

    async def run() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(N):
                await producer.send(
                    aio,
                    value=f"v{i}".encode(),
                    key=f"k{i % 7}".encode(),
                    partition=i % 3,
                    headers=[("h", str(i).encode())],
                )
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(aio, p) for p in range(3)])
            out: list[Any] = []
            async with asyncio.timeout(60):
                while len(out) < N:
                    batches = await consumer.getmany(timeout_ms=500)
                    for messages in batches.values():
                        out.extend(messages)
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert len(got) == N
    for p in range(3):
        mine = [m for m in got if m.partition == p]
        values = [int(m.value[1:]) for m in mine]
        assert values == [i for i in range(N) if i % 3 == p], f"partition {p} out of order"
        assert [m.offset for m in mine] == list(range(len(values)))  # message offsets
        for m in mine:
            i = int(m.value[1:])
            assert m.key == f"k{i % 7}".encode()
            assert list(m.headers) == [("h", str(i).encode())]
