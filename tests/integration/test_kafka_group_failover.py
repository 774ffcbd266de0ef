"""A consumer group of 3 librdkafka consumers (confluent-kafka, each its own process)
shares 12 partitions; one is killed with SIGKILL; the other two take its partitions
over and nothing is lost (at-least-once: what the killed one read but had not
committed is read again; the duplicates are counted and printed)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as RdProducer

pytestmark = pytest.mark.integration

PARTITIONS = 12
PER_PHASE = 600
COMMIT_EVERY = 20

CONSUMER = r"""
import os, sys
from confluent_kafka import Consumer, KafkaException
bootstrap, group, topic, stop_file, every = sys.argv[1:6]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
def on_assign(c, parts):
    print("ASSIGNED", " ".join(str(p.partition) for p in parts), flush=True)
consumer.subscribe([topic], on_assign=on_assign)
uncommitted = 0
while not os.path.exists(stop_file):
    msg = consumer.poll(0.2)
    if msg is None or msg.error() is not None:
        continue
    print("MSG", msg.partition(), msg.offset(), msg.value().decode(), flush=True)
    uncommitted += 1
    if uncommitted >= int(every):
        try:
            consumer.commit(asynchronous=False)
            uncommitted = 0
        except KafkaException as exc:  # e.g. REBALANCE_IN_PROGRESS, as from Kafka itself:
            print("COMMIT-REFUSED", exc, flush=True)  # re-read after the rebalance
if uncommitted:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        print("COMMIT-REFUSED", exc, flush=True)
consumer.close()
print("CLOSED", flush=True)
"""


class ConsumerProcess:
    """One group member in its own process; its stdout lines are collected."""

    def __init__(self, script: Path, args: list[str]):
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)
        self.values: list[int] = []
        self.assignments: list[list[int]] = []
        self.closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "MSG":
                self.values.append(int(rest.split()[2]))
            elif kind == "ASSIGNED":
                self.assignments.append([int(p) for p in rest.split()])
            elif kind == "CLOSED":
                self.closed = True

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout)
        self._reader.join(timeout)


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = RdProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in values:
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _wait(what: str, condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_three_librdkafka_consumers_one_killed_the_rest_take_over(kafka_cluster: Any, tmp_path: Path) -> None:
    cluster = kafka_cluster(2)
    cluster.create_topic("shared", PARTITIONS)
    script = tmp_path / "member.py"
    script.write_text(CONSUMER)
    stop = tmp_path / "stop"
    _produce(cluster.bootstrap, "shared", range(PER_PHASE))

    members = [
        ConsumerProcess(script, [cluster.bootstrap, "trio", "shared", str(stop), str(COMMIT_EVERY)]) for _ in range(3)
    ]
    try:
        # all three share the 12 partitions and each has read some of its own
        _wait(
            "3 members with 4 partitions each and messages read",
            lambda: (
                all(m.assignments and len(m.assignments[-1]) == 4 and m.values for m in members)
                and sorted(p for m in members for p in m.assignments[-1]) == list(range(12))
            ),
            60,
        )
        victim, survivors = members[0], members[1:]
        victim.proc.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_partitions = victim.assignments[-1]
        _produce(cluster.bootstrap, "shared", range(PER_PHASE, 2 * PER_PHASE))
        # the survivors take every partition over and read everything (again, for
        # what the victim read but had not committed)
        everything = set(range(2 * PER_PHASE))
        _wait(
            "the survivors to own the 12 partitions",
            lambda: (
                sorted(p for m in survivors for p in (m.assignments[-1] if m.assignments else [])) == list(range(12))
            ),
            60,
        )
        _wait("every message read", lambda: everything <= set(v for m in members for v in m.values), 60)
    finally:
        stop.touch()
        for member in members:
            try:
                member.wait(30)
            except subprocess.TimeoutExpired:
                member.proc.kill()
    assert all(m.closed for m in survivors)
    received = [v for m in members for v in m.values]
    duplicates = len(received) - len(set(received))
    print(
        f"3 consumers, 12 partitions, one SIGKILLed (it owned {killed_partitions}): "
        f"{len(received)} received for {len(everything)} produced, {duplicates} duplicates "
        f"(the victim read {len(victim.values)}, committing every {COMMIT_EVERY})"
    )
    assert set(received) == everything
    # at-least-once, bounded: a member commits every COMMIT_EVERY messages, so each
    # assignment it loses (a rebalance, or the kill) hands fewer than that on again
    assignments = sum(len(m.assignments) for m in members)
    assert duplicates < assignments * COMMIT_EVERY
