"""Partition reassignment with real brokers and a real ZooKeeper, through the CLI.

Counted: every acknowledged acks=all message is still readable after the move, the
replicas end byte-identical, removed replicas' logs are gone, the copy rate stays
under the throttle (measured on the new brokers' disks and printed), and a kill -9
of the leader, the controller or a new replica mid-copy does not stop the move.
Each bad input is refused and changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from broker.client import Admin, Producer
from tests.replication.conftest import (
    REPLICATED,
    Load,
    assert_every_ack_readable_in_order,
    broker_by_id,
    describe,
    read_partitions,
    replica_bytes,
    wait_until,
)
from tests.support.cli import logferry

pytestmark = pytest.mark.integration

SETTINGS = {**REPLICATED, "default_replication_factor": 2, "min_insync_replicas": 1}
THROTTLE = 400_000
"""Bytes/s each new broker may copy: the prefilled data then takes seconds to copy."""


def cli(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return logferry(*args, "--zk", cluster.zk_connect)


def prefill(cluster, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` bytes of 1 KiB messages in every partition (acks=all)."""
    with Producer(zk=cluster.zk_connect, acks="all", linger_ms=5, batch_bytes=32 * 1024) as producer:
        for p in range(partitions):
            for i in range(per_partition // 1024):
                producer.send(topic, [b"%d:fill:%06d:" % (p, i) + b"x" * 1000], partition=p)
        producer.flush(120)


def log_dir_bytes(broker, topic: str) -> int:
    return sum(f.stat().st_size for f in Path(broker.log_dir).glob(f"{topic}-*/*.log"))


class CopyMeter:
    """Samples how many bytes of ``topic`` the given brokers hold, 5 times a second."""

    def __init__(self, brokers, topic: str):
        self.brokers, self.topic = brokers, topic
        self.samples: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), {b.id: log_dir_bytes(b, self.topic) for b in self.brokers}))
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def average_rate(self, broker_id: int) -> tuple[float, float]:
        """Bytes/s of the copy (from the first sample that grew to the first holding
        90% of the last one: after that only the producer's trickle arrives), and
        that time."""
        grew = [
            i for i in range(1, len(self.samples)) if self.samples[i][1][broker_id] > self.samples[i - 1][1][broker_id]
        ]
        if not grew:
            return 0.0, 0.0
        final = self.samples[-1][1][broker_id]
        end = next(i for i, (_, s) in enumerate(self.samples) if s[broker_id] >= 0.9 * final)
        (t0, s0), (t1, s1) = self.samples[grew[0] - 1], self.samples[max(end, grew[0])]
        return (s1[broker_id] - s0[broker_id]) / (t1 - t0), t1 - t0

    def peak_rate(self, broker_id: int, window: float = 2.0) -> float:
        """The highest bytes/s over any ``window`` seconds."""
        best = 0.0
        for i, (t0, s0) in enumerate(self.samples):
            for t1, s1 in self.samples[i + 1 :]:
                if t1 - t0 >= window:
                    best = max(best, (s1[broker_id] - s0[broker_id]) / (t1 - t0))
                    break
        return best


def assert_replicas_identical(cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    with Admin(zk=cluster.zk_connect) as admin:
        parts = admin.describe_partitions(topic)
    for p in range(partitions):
        holders = [broker_by_id(cluster, b) for b in parts[p].replicas]

        def same(p: int = p, holders: list = holders) -> bool:
            logs = [replica_bytes(b, topic, p) for b in holders]
            return len(set(logs)) == 1 and len(logs[0]) > 0

        wait_until(same, 30, f"byte-identical replicas of {topic}-{p} on {parts[p].replicas}")
        for broker in cluster.brokers:
            if broker.id not in parts[p].replicas:
                wait_until(
                    lambda broker=broker, p=p: not (Path(broker.log_dir) / f"{topic}-{p}").exists(),
                    30,
                    f"broker {broker.id} deleted its copy of {topic}-{p}",
                )
    return {p: list(parts[p].replicas) for p in range(partitions)}


@pytest.mark.slow
def test_grow_two_brokers_to_four_throttled_under_load(broker_cluster, tmp_path):
    cluster = broker_cluster(2, broker=SETTINGS)
    topic, partitions = "grow", 4
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, partitions, replication_factor=2)
    prefill(cluster, topic, partitions, 600_000)
    new = [cluster.add(SETTINGS), cluster.add(SETTINGS)]
    load = Load(cluster, topic, partitions).start()
    load.wait_for_acks(500, 60, "acks before the reassignment")
    generated = cli(cluster, "reassign", "generate", "--topics", topic, "--brokers", "1,2,3,4")
    assert generated.returncode == 0, generated.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(generated.stdout)
    plan = json.loads(generated.stdout)["partitions"]
    assert Counter(e["replicas"][0] for e in plan) == {1: 1, 2: 1, 3: 1, 4: 1}
    meter = CopyMeter(new, topic)
    started = time.monotonic()
    run = cli(cluster, "reassign", "execute", "--plan", str(plan_file), "--throttle", str(THROTTLE), "--wait", "150")
    took = time.monotonic() - started
    meter.stop()
    print(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bytes (" in run.stdout  # progress per partition was shown
    load.wait_for_acks(300, 60, "acks after the reassignment")
    load.stop()
    for broker in new:
        rate, seconds = meter.average_rate(broker.id)
        peak = meter.peak_rate(broker.id)
        print(
            f"broker {broker.id}: copied {log_dir_bytes(broker, topic)} bytes at "
            f"{rate:.0f} bytes/s over {seconds:.1f} s (peak {peak:.0f} over 2 s) against "
            f"a throttle of {THROTTLE} bytes/s (whole move {took:.1f} s)"
        )
        assert rate <= THROTTLE * 1.15, f"broker {broker.id} copied {rate:.0f} bytes/s"
    verify = cli(cluster, "reassign", "verify", "--plan", str(plan_file))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    replicas = assert_replicas_identical(cluster, topic, partitions)
    assert replicas == {e["partition"]: e["replicas"] for e in plan}
    leaders = Counter(i.leader for i in describe(cluster, topic).values())
    assert leaders == {1: 1, 2: 1, 3: 1, 4: 1}, leaders
    consumed = read_partitions(cluster, topic, partitions)
    assert_every_ack_readable_in_order(load, consumed)
    print(f"{load.acked_count} acknowledged messages, none lost; {len(load.failed)} produce errors")


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["leader", "controller", "new_replica"])
def test_kill9_mid_copy_the_move_finishes(broker_cluster, tmp_path, victim):
    cluster = broker_cluster(2, broker=SETTINGS)
    topic, partitions = "moving", 2
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, partitions, replication_factor=2)
    prefill(cluster, topic, partitions, 800_000)
    cluster.add(SETTINGS)
    cluster.add(SETTINGS)
    load = Load(cluster, topic, partitions).start()
    load.wait_for_acks(300, 60, "acks before the reassignment")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": p, "replicas": [3, 4] if p == 0 else [4, 3]}
                    for p in range(partitions)
                ],
            }
        )
    )
    run = cli(cluster, "reassign", "execute", "--plan", str(plan_file), "--throttle", str(THROTTLE))
    assert run.returncode == 0, run.stderr
    copying = lambda: log_dir_bytes(broker_by_id(cluster, 3), topic) > 100_000  # noqa: E731
    wait_until(copying, 60, "broker 3 copying")
    if victim == "leader":
        target = describe(cluster, topic)[0].leader
    elif victim == "controller":
        with Admin(brokers=cluster.bootstrap, request_timeout=5) as admin:
            target = admin.describe_cluster().controller
    else:
        target = 3
    victim_broker = broker_by_id(cluster, target)
    victim_broker.kill()
    print(f"kill -9 of broker {target} ({victim})")
    time.sleep(2)
    victim_broker.start()
    done = cli(cluster, "reassign", "verify", "--plan", str(plan_file), "--wait", "150")
    print(done.stdout[-2000:])
    assert done.returncode == 0, done.stdout + done.stderr
    load.wait_for_acks(300, 60, "acks after the reassignment")
    load.stop()
    assert_replicas_identical(cluster, topic, partitions)
    consumed = read_partitions(cluster, topic, partitions)
    assert_every_ack_readable_in_order(load, consumed)
    print(f"{victim}: {load.acked_count} acknowledged messages, none lost")


def test_decommission_empties_the_broker(broker_cluster):
    cluster = broker_cluster(3, broker=SETTINGS)
    topic, partitions = "leaving", 3
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, partitions, replication_factor=2)
    prefill(cluster, topic, partitions, 50_000)
    run = cli(cluster, "broker", "decommission", "3", "--throttle", "10000000", "--wait", "90")
    print(run.stdout[-2000:])
    assert run.returncode == 0, run.stdout + run.stderr
    with Admin(zk=cluster.zk_connect) as admin:
        parts = admin.describe_partitions(topic)
    assert all(3 not in i.replicas and len(i.replicas) == 2 for i in parts.values()), parts
    wait_until(
        lambda: not list(Path(broker_by_id(cluster, 3).log_dir).glob(f"{topic}-*")), 30, "broker 3 holds no partition"
    )
    assert_replicas_identical(cluster, topic, partitions)


def _assignment(cluster, topic: str) -> dict[int, list[int]]:
    with Admin(zk=cluster.zk_connect) as admin:
        return {p: list(i.replicas) for p, i in admin.describe_partitions(topic).items()}


def test_bad_input_is_refused_and_changes_nothing(broker_cluster, tmp_path):
    cluster = broker_cluster(3, broker=SETTINGS)
    topic = "fixed"
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic(topic, 3, replication_factor=2)
    prefill(cluster, topic, 3, 300_000)
    before = _assignment(cluster, topic)

    def plan(entries) -> str:
        path = tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"version": 1, "partitions": entries}))
        return str(path)

    def refused(result, words: str) -> None:
        assert result.returncode == 2, result.stdout + result.stderr
        assert words in result.stderr, result.stderr
        assert _assignment(cluster, topic) == before

    refused(
        cli(
            cluster,
            "reassign",
            "execute",
            "--throttle",
            "1000",
            "--plan",
            plan([{"topic": topic, "partition": 0, "replicas": [1, 9]}]),
        ),
        "not registered",
    )
    refused(
        cli(
            cluster,
            "reassign",
            "execute",
            "--throttle",
            "1000",
            "--plan",
            plan([{"topic": topic, "partition": 7, "replicas": [1, 2]}]),
        ),
        "partition fixed-7",
    )
    refused(
        cli(cluster, "reassign", "generate", "--topics", topic, "--brokers", "1,2", "--replication-factor", "3"),
        "needs 3 brokers",
    )
    refused(cli(cluster, "reassign", "generate", "--topics", topic, "--brokers", "1,5"), "not registered")
    refused(
        cli(
            cluster,
            "reassign",
            "execute",
            "--throttle",
            "0",
            "--plan",
            plan([{"topic": topic, "partition": 0, "replicas": [2, 3]}]),
        ),
        "positive",
    )
    refused(cli(cluster, "broker", "decommission", "9", "--throttle", "1000"), "not registered")
    with Admin(zk=cluster.zk_connect) as admin:
        admin.create_topic("strict", 1, replication_factor=2, min_insync_replicas=2)
    refused(
        cli(
            cluster,
            "reassign",
            "execute",
            "--throttle",
            "1000",
            "--plan",
            plan([{"topic": "strict", "partition": 0, "replicas": [1]}]),
        ),
        "min_insync_replicas is 2",
    )
    # one at a time: a slow move runs, a second is refused, cancel puts it back
    slow = {"topic": topic, "partition": 0, "replicas": [b for b in (1, 2, 3) if b not in before[0]] + [before[0][0]]}
    first = cli(cluster, "reassign", "execute", "--throttle", "20000", "--plan", plan([slow]))
    assert first.returncode == 0, first.stderr
    refused_second = cli(
        cluster,
        "reassign",
        "execute",
        "--throttle",
        "1000",
        "--plan",
        plan([{"topic": topic, "partition": 1, "replicas": [1, 2, 3]}]),
    )
    assert refused_second.returncode == 2 and "already under way" in refused_second.stderr
    assert _assignment(cluster, topic)[1] == before[1]
    cancel = cli(cluster, "reassign", "cancel")
    assert cancel.returncode == 0 and "cancelled" in cancel.stdout, cancel.stdout + cancel.stderr
    back = cli(cluster, "reassign", "verify", "--wait", "60")
    assert back.returncode == 0, back.stdout
    wait_until(lambda: _assignment(cluster, topic) == before, 30, "the original replicas back")
    # the only in-sync replica of a replicated partition cannot be decommissioned
    lonely, other = before[2][0], before[2][1]
    broker_by_id(cluster, other).kill()
    wait_until(
        lambda: describe(cluster, topic, avoid=broker_by_id(cluster, other))[2].isr == [lonely],
        30,
        f"isr of {topic}-2 down to broker {lonely}",
    )
    result = cli(cluster, "broker", "decommission", str(lonely), "--throttle", "1000")
    refused(result, "only in-sync replica")
    assert "no reassignment under way" in cli(cluster, "reassign", "verify").stdout
