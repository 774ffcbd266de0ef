"""``logferry consume`` against a real broker: --output json, agent records, --from -N, --raw.

The tests share the module's broker, each with a topic of its own."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from agent.encode import chunk_prefix, encode_values
from broker.client import Producer, SimpleConsumer
from tests.support.cli import logferry
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _consume(*args: str, zk: str) -> list[str]:
    done = logferry("consume", *args, zk=zk)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_consume_json_tail_and_raw(module_cluster, unique_name):
    cluster = module_cluster
    zk = cluster.zk_connect
    consumed = unique_name("consumed")
    plain = [f"plain-{i}".encode() for i in range(25)]
    lines = [f"GET /page/{i} 200".encode() for i in range(15)]
    agent = encode_values(chunk_prefix(1700000000000, "web-1", "/var/log/app.log"), lines, [i * 100 for i in range(15)])
    with Producer(brokers=cluster.bootstrap) as producer:
        # several sends: several batches, so the tail has to find a boundary mid-partition
        for i in range(0, 25, 5):
            producer.send(consumed, plain[i : i + 5], partition=0).wait(10)
        producer.send(consumed, agent[:7], partition=0).wait(10)
        producer.send(consumed, agent[7:], partition=0).wait(10)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        wait_until(lambda: sum(1 for _ in consumer.messages(consumed, 0)) == 40, 10, "flush")

    objects = [json.loads(line) for line in _consume(consumed, "-p", "0", "--output", "json", zk=zk)]
    assert len(objects) == 40
    assert [o["value"] for o in objects[:25]] == [v.decode() for v in plain]
    assert all(
        o["topic"] == consumed and o["partition"] == 0 and o["key"] is None and o["timestamp"] > 0 and "record" not in o
        for o in objects[:25]
    )
    assert [o["value"] for o in objects[25:]] == [line.decode() for line in lines]
    assert [o["record"]["offset"] for o in objects[25:]] == [i * 100 for i in range(15)]
    assert {o["record"]["host"] for o in objects[25:]} == {"web-1"}
    positions = [(o["offset"], o["index"]) for o in objects]
    assert positions == sorted(positions) and len(set(positions)) == 40

    last = _consume(consumed, "-p", "0", "--from", "-10", zk=zk)
    assert last == [line.decode() for line in lines[5:]]  # the agent records' lines, in order
    # all partitions (the other three are empty); 17 = 2 plain + the 15 agent records
    assert _consume(consumed, "--tail", "17", zk=zk) == (
        [v.decode() for v in plain[23:]] + [line.decode() for line in lines]
    )
    assert _consume(consumed, "-p", "0", "--from", "-100", zk=zk)[:25] == [v.decode() for v in plain]
    assert _consume(consumed, "-p", "0", "--from", "-0", zk=zk) == []

    raw = [
        json.loads(line) for line in _consume(consumed, "-p", "0", "--from", "-3", "--output", "json", "--raw", zk=zk)
    ]
    assert [base64.b64decode(o["value_b64"]) for o in raw] == agent[12:]
    assert all("record" not in o for o in raw)
    raw_text = _consume(consumed, "-p", "0", "--from", "-1", "--raw", zk=zk)
    assert raw_text != [lines[-1].decode()] and lines[-1].decode() in "\n".join(raw_text)


def test_consume_from_a_time_starts_at_the_first_message_at_or_after_it(module_cluster, unique_name):
    """--from TIME begins inside the batch holding that time, not at the batch's start."""
    cluster = module_cluster
    timed = unique_name("timed")
    base = 1_800_000_000_000  # ms; one batch of 10 messages stamped base, base+1s, ...
    with Producer(brokers=cluster.bootstrap, linger_ms=60_000) as producer:
        futures = [producer.send(timed, [f"t{i}".encode()], partition=1, timestamp=base + i * 1000) for i in range(10)]
        producer.flush(10)
        for future in futures:
            future.wait(10)
    with SimpleConsumer(brokers=cluster.bootstrap) as consumer:
        wait_until(lambda: sum(1 for _ in consumer.messages(timed, 1)) == 10, 10, "flush")
        offsets = {m.offset for m in consumer.messages(timed, 1)}
        assert len(offsets) == 1  # one batch: the time start has to skip inside it
        at = datetime.fromtimestamp((base + 4500) / 1000, tz=UTC)
        assert [m.value for m in consumer.messages(timed, 1, start=at)] == [f"t{i}".encode() for i in range(5, 10)]
        after_all = datetime.fromtimestamp((base + 60_000) / 1000, tz=UTC)
        assert list(consumer.messages(timed, 1, start=after_all)) == []

    iso = datetime.fromtimestamp((base + 3000) / 1000, tz=UTC).isoformat()
    expected = [f"t{i}" for i in range(3, 10)]  # 3 is stamped exactly at the time: kept
    assert _consume(timed, "-p", "1", "--from", iso, zk=cluster.zk_connect) == expected
    assert _consume(timed, "--from", iso, zk=cluster.zk_connect) == expected  # all partitions
    assert _consume(timed, "-p", "1", "--from", iso, "-n", "2", zk=cluster.zk_connect) == expected[:2]
