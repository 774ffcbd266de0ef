"""What every nemesis test of issue 37 does around its fault: the cluster, the workload,
the wait for recovery, and the checker's verdict.

:func:`three_brokers` builds the cluster the nemeses share on the test network: a
ZooKeeper host (or three, an ensemble), three broker hosts and a client host on one
switch, replication factor
3, min in-sync replicas 2, ZooKeeper session 6 s (the issue's), a topic of 3 partitions
with every replica in sync. :func:`run_nemesis` runs the workload
(tests/support/workload.py) on the client host, lets the fault do its work for a
bounded time (:func:`timing`: fixed in ``make test``, drawn from a printed seed by
``scripts/nemesis.sh``), heals every cut, waits until every replica is back in sync and
every partition acknowledges again, reads what the cluster holds and returns the
checker's :class:`~tests.support.checker.Verdict`, after printing it as one line
starting with ``verdict:`` (and, for ``scripts/nemesis.sh``, a JSON line: :func:`record`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from broker.client import Admin, SimpleConsumer
from broker.coordination.partition_state import PartitionState
from broker.coordination.zk import partition_state_path
from broker.testing.network import Host
from broker.testing.zkserver import LocalZooKeeper
from tests.replication.conftest import REPLICATED
from tests.support.brokers import BrokerProcess
from tests.support.checker import GroupRun, LineVerdict, Verdict, answer_spans, check, read_positions
from tests.support.network import TestNetwork
from tests.support.waiting import wait_until
from tests.support.workload import GroupMember, Reader, Workload

MARKS = [pytest.mark.integration, pytest.mark.slow]
"""Every nemesis test module's ``pytestmark``. They run in ``make test`` (so in CI), each
once with :data:`FAULT_S`, on several workers at once: every test's network lives in
namespaces of its own (tests/support/network.py). Without root they skip, saying why."""

FAULT_S = float(os.environ.get("LOGFERRY_NEMESIS_FAULT_S", "10"))
"""How long each fault is held (10 s unless ``LOGFERRY_NEMESIS_FAULT_S`` says otherwise)."""

SEED_ENV = "LOGFERRY_NEMESIS_SEED"
"""Set (``scripts/nemesis.sh`` sets it): the timing of each fault is drawn from a
generator seeded with it and the nemesis's name (:func:`timing`), so a run is replayed
by giving the seed its verdict line printed. Unset (``make test``): the fault starts
once 2,000 messages are acknowledged and is held :data:`FAULT_S`."""
DELAY_S = (0.0, 8.0)
"""Bounds of the random wait, after the first 2,000 acknowledgements, before the fault."""
HOLD_S = (2.0, 20.0)
"""Bounds of the random hold: from well under the 6 s session (a fault the brokers ride
out without an election) to over three sessions; ``LOGFERRY_NEMESIS_FAULT_S`` fixes it."""


@dataclass(frozen=True)
class Timing:
    """When a nemesis's fault starts and how long it is held."""

    delay_s: float
    """Seconds after the first 2,000 acknowledgements."""
    hold_s: float
    seed: str | None
    """What drew them (None: the fixed timing of ``make test``)."""

    def __str__(self) -> str:
        drawn = f", seed {self.seed}" if self.seed is not None else ""
        return f"fault {self.delay_s:.1f}s after 2,000 acks, held {self.hold_s:.1f}s{drawn}"


def timing(name: str, environ: Mapping[str, str] = os.environ) -> Timing:
    """The timing of nemesis ``name`` (see :data:`SEED_ENV`): the same seed and name draw
    the same timing, whatever else runs, so each nemesis of a run replays alone
    (``-k``)."""
    seed = environ.get(SEED_ENV, "").strip()
    fixed = environ.get("LOGFERRY_NEMESIS_FAULT_S")
    if not seed:
        return Timing(0.0, float(fixed) if fixed else FAULT_S, None)
    rng = random.Random(f"{seed}:{name}")
    delay = round(rng.uniform(*DELAY_S), 1)
    hold = round(rng.uniform(*HOLD_S), 1)
    return Timing(delay, float(fixed) if fixed else hold, seed)


TOPIC = "jepsen"
PARTITIONS = 3
SETTINGS = {**REPLICATED, "zk_session_timeout_s": 6.0}
"""The replication tests' settings (RF 3, min ISR 2, 1.5 s replica lag) with the
issue's 6 s ZooKeeper session."""


@dataclass
class Cluster:
    """The nemeses' cluster on the test network (see :func:`three_brokers`)."""

    net: TestNetwork
    zk_connect: str
    zookeepers: list[LocalZooKeeper]
    """Its ZooKeeper servers: one, or an ensemble's members on hosts zk1, zk2, ..."""
    client: Host
    """The host the workload and the checks' clients run on."""
    by_id: dict[int, BrokerProcess]
    killed_at: dict[int, list[float]] = field(default_factory=dict)
    """When (``time.time()``) :meth:`kill` killed each broker: its log has no end line
    for what it led then (:func:`~tests.support.checker.answer_spans`)."""

    def kill(self, broker_id: int) -> None:
        """kill -9 broker ``broker_id``, noting when."""
        self.by_id[broker_id].kill()
        self.killed_at.setdefault(broker_id, []).append(time.time())

    def leader(self, partition: int) -> int:
        """The partition's leader as ZooKeeper names it (call inside the client host)."""
        with Admin(zk=self.zk_connect) as admin:
            return admin.describe_partitions(TOPIC)[partition].leader

    def wait_for_states(
        self, accept: Callable[[dict[int, PartitionState]], bool], what: str, timeout: float = 30.0
    ) -> dict[int, PartitionState]:
        """Poll every partition's state in ZooKeeper itself (not a broker's view of it,
        which a cut broker keeps stale) until ``accept`` holds; return the states. Call
        inside the client host. For a second fault that needs an election first."""
        client = KazooClient(hosts=self.zk_connect, timeout=10.0)
        client.start(timeout=10)

        def states() -> dict[int, PartitionState] | None:
            found = {}
            for p in range(PARTITIONS):
                state = PartitionState.decode(client.get(partition_state_path(TOPIC, p))[0])
                if state is None:
                    return None
                found[p] = state
            return found if accept(found) else None

        try:
            return wait_until(states, timeout, what, interval=0.2, ignore=(KazooException,))
        finally:
            client.stop()
            client.close()


def three_brokers(net: TestNetwork, ensemble: int = 0, broker: Mapping[str, Any] | None = None) -> Cluster:
    """Hosts ``zk`` (or ``zk1``... for an ``ensemble`` of that many members), ``b1``-``b3``
    and ``client`` on switch ``lan``, ZooKeeper and three brokers started, topic
    :data:`TOPIC` created with every replica in sync. ``broker``: settings over
    :data:`SETTINGS` (e.g. ``unclean_leader_election``)."""
    net.switch("lan")
    if ensemble:
        zookeepers = net.zookeeper_ensemble([net.host(f"zk{i}", "lan") for i in range(1, ensemble + 1)])
    else:
        zookeepers = [net.zookeeper(net.host("zk", "lan"))]
    zk_connect = ",".join(z.hosts for z in zookeepers) + "/nemesis"
    for i in (1, 2, 3):
        net.broker(net.host(f"b{i}", "lan"), i, zk_connect, broker={**SETTINGS, **(broker or {})})
    cluster = Cluster(net, zk_connect, zookeepers, net.host("client", "lan"), {b.id: b for b in net.brokers})
    with cluster.client.inside():
        with Admin(zk=zk_connect) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        wait_until(lambda: full_isr(net), 90, "every replica in sync", interval=0.2)
    return cluster


def full_isr(net: TestNetwork) -> bool:
    """Every broker reports every partition led and every replica in sync."""
    for broker in net.brokers:
        try:
            with Admin(brokers=[broker.address], request_timeout=3) as admin:
                parts = admin.describe_partitions(TOPIC)
        except Exception:
            return False
        if len(parts) != PARTITIONS or not all(i.leader >= 0 and len(i.isr) == 3 for i in parts.values()):
            return False
    return True


def replica_bytes(net: TestNetwork, partition: int, end: int) -> list[bytes]:
    """Each broker's bytes of ``partition`` below ``end`` (its segments, in order)."""
    out = []
    for broker in net.brokers:
        directory = broker.log_dir / f"{TOPIC}-{partition}"
        out.append(b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))[:end])
    return out


def settle(consumer: SimpleConsumer, quiet_s: float = 1.0, timeout: float = 20.0) -> None:
    """Wait until no partition's visible end moves for ``quiet_s``: an acks=all answer
    does not wait for the leader's fsync, which the high watermark does, so right after
    the last acknowledgement the high watermark may still be below it (a read then
    would miss the tail: a run once reported the last 40 acknowledged messages lost)."""
    ends: list[int] = []
    since = time.monotonic()

    def quiet() -> bool:
        nonlocal ends, since
        now = [consumer.offsets(TOPIC, p).end for p in range(PARTITIONS)]
        if now != ends:
            ends, since = now, time.monotonic()
        return time.monotonic() - since >= quiet_s

    wait_until(quiet, timeout, f"every partition's visible end still for {quiet_s:g}s", interval=0.2)


def run_nemesis(
    cluster: Cluster,
    name: str,
    fault: Callable[[], str],
    then: Callable[[], str] | None = None,
    heal: Callable[[], str] | None = None,
) -> Verdict:
    """Run the workload, apply ``fault`` (inside the client host; it returns what it
    did, for the output) when :func:`timing` says, hold it as long as it says, heal,
    wait for recovery, and judge.

    A combined nemesis adds ``then``: a second fault, called right after ``fault``, that
    waits (bounded) for what it needs (an election, say) and acts; the hold then counts
    from the first fault, and lasts at least until ``then`` returns. ``heal`` is called
    after every cut is healed: it restarts what the nemesis killed, resumes what it froze.

    Prints ``verdict: <name> <hold>s: <the verdict's summary>; full ISR <s> after the
    heal; <timing>`` and returns the verdict; the caller asserts what must hold."""
    net = cluster.net
    when = timing(name)
    with cluster.client.inside():
        workload = Workload(cluster.zk_connect, TOPIC, PARTITIONS).start()
        reader = Reader(cluster.zk_connect, TOPIC, PARTITIONS).start()
        member = GroupMember(cluster.zk_connect, TOPIC).start()
        try:
            wait_until(lambda: workload.acked_count() >= 2_000, 60, "2,000 acknowledged before the fault")
            time.sleep(when.delay_s)  # the timing drawn: time is the scenario
            fault_at = time.monotonic()
            print(f"{name}: {fault()}; {when}")
            if then is None:
                time.sleep(when.hold_s)  # the fault itself: time is the scenario
            else:
                print(f"{name}: then {then()} ({time.monotonic() - fault_at:.1f}s after the fault)")
                time.sleep(max(0.0, fault_at + when.hold_s - time.monotonic()))
            net.heal()
            if heal is not None:
                print(f"{name}: healed: {heal()}")
            healed_at = time.monotonic()
            wait_until(lambda: full_isr(net), 90, "every replica back in sync", interval=0.5)
            for p in range(PARTITIONS):  # each partition acknowledges again
                wait_until(
                    lambda p=p: (workload.last_ack(p) or 0) > healed_at, 60, f"partition {p} acknowledging again"
                )
            in_sync_s = time.monotonic() - healed_at
        finally:
            try:
                reader.stop()
            finally:
                try:
                    member.stop()
                finally:
                    workload.stop()
        until = time.monotonic()

        stored: dict[int, list[bytes]] = {}
        positions: dict[int, list[tuple[int, int]]] = {}
        ends: dict[int, int] = {}
        with SimpleConsumer(zk=cluster.zk_connect) as consumer:
            settle(consumer)
            for p in range(PARTITIONS):
                stored[p], positions[p], ends[p] = read_positions(consumer, TOPIC, p)
    wait_until(  # followers fetch up to the high watermark: every replica holds it
        lambda: all(len(c) == ends[p] for p in range(PARTITIONS) for c in replica_bytes(net, p, ends[p])),
        30,
        "every replica to hold the high watermark",
    )
    replicas = {p: replica_bytes(net, p, ends[p]) for p in range(PARTITIONS)}
    spans = [
        span for b in net.brokers for span in answer_spans(b.id, b.log_text(), TOPIC, cluster.killed_at.get(b.id, []))
    ]
    group = GroupRun(member.reads, member.committed, positions, ends)
    verdict = check(workload.batches, stored, replicas, fault_at, until, reader.reads, spans, group)
    verdict.read_in_fault = reader.read_between(fault_at, healed_at)
    print(f"\nverdict: {name} {when.hold_s:g}s: {verdict.summary()}; full ISR {in_sync_s:.1f}s after the heal; {when}")
    keep_logs(net, name)
    record(name, when, verdict, in_sync_s)
    return verdict


def record(name: str, when: Timing, verdict: Verdict | LineVerdict, in_sync_s: float | None = None) -> None:
    """Append the run as one JSON line to ``$LOGFERRY_NEMESIS_LOGS/verdicts.jsonl`` when
    that is set: ``tests/support/nemesis_report.py`` makes the results table from them
    (a :class:`LineVerdict`, of a pipeline nemesis, has no ``full_isr_s``)."""
    keep = os.environ.get("LOGFERRY_NEMESIS_LOGS")
    if not keep:
        return
    line = {
        "nemesis": name,
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        **asdict(when),
        **asdict(verdict),
        "problems": verdict.problems(),
        **({} if in_sync_s is None else {"full_isr_s": round(in_sync_s, 1)}),
    }
    with (Path(keep) / "verdicts.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


def keep_logs(net: TestNetwork, name: str, others: Sequence[Path] = ()) -> None:
    """Copy the brokers' logs to ``$LOGFERRY_NEMESIS_LOGS/<name>-<broker>.log`` when that
    is set (``scripts/nemesis.sh`` sets it to its output directory), and ``others``
    (an agent's, a mirror's log) to ``<name>-<file name>``: pytest deletes its
    temporary directories a few runs later, and the logs say why a run paused."""
    keep = os.environ.get("LOGFERRY_NEMESIS_LOGS")
    if not keep:
        return
    stem = "-".join(name.lower().split())
    for broker in net.brokers:
        if broker.log_file.exists():
            shutil.copy(broker.log_file, Path(keep) / f"{stem}-{broker.name}.log")
    for path in others:
        if path.exists():
            shutil.copy(path, Path(keep) / f"{stem}-{path.name}")


def assert_sound(verdict: Verdict) -> None:
    """What every nemesis must keep: nothing acknowledged lost, no duplicate, order,
    identical replicas, no partition epoch answered by two brokers (nor a replaced
    leader that never stopped answering), a reader that read while the fault held and
    saw nothing the partitions do not hold in the end, in their order, a consumer group
    that was handed nothing the partitions do not hold and committed only positions the
    final log has, with nothing below them skipped, an outcome for every batch, and the
    counts adding up."""
    assert not verdict.problems(), f"{verdict.problems()}: {verdict.examples}"
    assert verdict.read_in_fault > 0, "the reader read nothing while the fault held"
    assert len(verdict.leader_overlap_s) == PARTITIONS, "no acks=all answer span in the brokers' logs"
    assert verdict.group_read > 0, "the group member read nothing"
    assert verdict.acked > 2_000 and verdict.stored >= verdict.acked  # sent N, acknowledged N, stored N
    assert verdict.unknown == 0  # every batch got its outcome


__all__ = [
    "PARTITIONS",
    "SETTINGS",
    "TOPIC",
    "Cluster",
    "Timing",
    "assert_sound",
    "full_isr",
    "keep_logs",
    "record",
    "run_nemesis",
    "three_brokers",
    "timing",
]
