"""The audit across tiers with real processes: an agent on the live cluster, mirrors into
the analysis cluster, the console's pipeline view over both clusters' audit topics.

agent -> mirror at 100% once drained (offset-preserving mode, the default); another
preserving mirror copies nothing twice; a producing mirror that copies everything again
(a new group, as a restart from an old position would) shows its tier over 100% for batches the target
appends twice (a producer without idempotence) and stays at 100% for the agents' batches
(the target drops copies of an idempotent producer's batches it holds); an agent tier
that counts more than the clusters hold (what deleting messages between tiers looks
like) shows the next tier under 100%.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.client import Admin, AuditRecord, Producer, SimpleConsumer, UnknownTopicOrPartitionError
from console.audit import MIRROR_SUFFIX, AuditReader, pipeline_rows
from tests.agent import conftest as agent_fixtures
from tests.agent.conftest import wait_until
from tests.mirror.conftest import topic_messages, wait_for

agent_process = agent_fixtures.agent_process  # the fixture, shared with tests/agent

pytestmark = pytest.mark.integration

LINES = 3000
PLAIN = 500


def _audit_view(zk: str) -> dict:
    """The console's view of a cluster's audit: ``_audit`` and a mirror's ``_audit.mirror``."""
    reader = AuditReader()
    with SimpleConsumer(zk=zk) as consumer:
        for topic in ("_audit", "_audit" + MIRROR_SUFFIX):
            try:
                partitions = consumer.partitions(topic)
            except UnknownTopicOrPartitionError:
                continue
            AuditReader(topic, reader.tally).poll(consumer, partitions)
    return reader.view()


def _pipeline(source, target, topic: str) -> dict:
    """The one row of ``topic`` in the pipeline: all its messages fall in one hour-long window."""
    rows = [
        r
        for r in pipeline_rows([("live", _audit_view(source.zk_connect)), ("analysis", _audit_view(target.zk_connect))])
        if r["topic"] == topic
    ]
    assert len(rows) == 1, rows
    return rows[0]["stages"]


@pytest.mark.slow
def test_agent_and_mirror_tiers_at_100_then_duplicates_and_losses_show(
    two_clusters, mirrors, agent_process, tmp_path: Path
):
    source, target = two_clusters()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(b"".join(b"line %d\n" % i for i in range(LINES)))
    agent = agent_process(
        {
            "host": "web-1",
            "state_dir": str(tmp_path / "state"),
            "poll_interval_s": 0.05,
            "shutdown_timeout_s": 20.0,
            "cluster": {"zk": source.zk_connect},
            "producer": {"linger_ms": 5},
            "audit": {"window_s": 3600},  # one window: the final records come at the stop
            "sources": [{"name": "app", "pattern": f"{logs}/*.log", "topic": "app"}],
        }
    ).start()
    wait_until(lambda: agent.counter("messages_acked") >= LINES, 60, "agent acks")
    assert agent.terminate() == 0
    (window,) = [r["window_start"] for r in _audit_view(source.zk_connect)["rows"]]
    # a producer without idempotence (an older agent, say) and its agent-stage record
    with Producer(zk=source.zk_connect, idempotence=False, acks=1) as producer:
        producer.send("plain", [b"p%d" % i for i in range(PLAIN)], partition=0, timestamp=window + 1000)
        producer.send("_audit", [AuditRecord("plain", window, window + 3600_000, PLAIN, PLAIN, "old-agent").encode()])
        producer.flush(30)

    def copy(name: str, group: str, mode: str = "preserve", expect_new: bool = True) -> None:
        """Run a mirror until it copied everything (or, ``expect_new`` False, found it copied)."""
        process = mirrors(name, source, target, group=group, audit_window_s=3600, mode=mode)
        with Admin(zk=source.zk_connect) as admin:
            # a mirror never copies the agents' heartbeats (status of the source cluster)
            topics = [t for t in admin.list_topics() if t != "_agents"]
            partitions = sum(len(admin.describe_topic(t)) for t in topics)
        total = sum(topic_messages(source.zk_connect, t) for t in topics)
        if mode == "produce":  # acknowledged copies, the ones the target dropped included
            wait_for(lambda: process.status().get("messages_total", 0) >= total, 60, f"{name} copied")
        elif expect_new:
            wait_for(
                lambda: all(
                    topic_messages(target.zk_connect, t) >= topic_messages(source.zk_connect, t) for t in topics
                ),
                60,
                f"{name} copied",
            )
        else:
            wait_for(
                lambda: len(process.status().get("partitions", {})) == partitions, 60, f"{name} owns every partition"
            )
            time.sleep(3)  # resumed at the target's end: nothing to copy
        assert process.terminate() == 0  # publishes its last window

    copy("m1", "mirror")
    stages = _pipeline(source, target, "app")
    assert stages["agent"]["acked"] == LINES and stages["agent"]["cluster"] == "live"
    assert stages["mirror"] == {
        "sent": LINES,
        "acked": LINES,
        "cluster": "analysis",
        "complete_pct": 100.0,
        "of": "agent",
    }
    assert _pipeline(source, target, "plain")["mirror"]["complete_pct"] == 100.0

    # a preserving mirror of another group resumes from the target's end: nothing twice
    copy("m2", "mirror-preserving-again", expect_new=False)
    assert _pipeline(source, target, "plain")["mirror"]["complete_pct"] == 100.0

    # a producing mirror copies everything again (a new group starts at the beginning, as
    # a restart from an old position does): the target drops the agent's idempotent
    # batches it holds, so "app" stays at 100%; the plain producer's batches are appended
    # twice: over 100%
    copy("m3", "mirror-again", mode="produce")
    assert topic_messages(target.zk_connect, "app") == LINES and topic_messages(target.zk_connect, "plain") == 2 * PLAIN
    stages = _pipeline(source, target, "app")
    assert stages["mirror"]["sent"] == 2 * LINES and stages["mirror"]["complete_pct"] == 100.0
    assert _pipeline(source, target, "plain")["mirror"]["complete_pct"] == 200.0

    # the agents counted 1,000 messages more than the live cluster holds (deleted between
    # the tiers): the mirror's tier is short
    with Producer(zk=source.zk_connect) as producer:
        producer.send("_audit", [AuditRecord("app", window, window + 3600_000, 1000, 1000, "web-2").encode()])
        producer.flush(30)
    # acknowledged is not yet visible to a reader (the fsync publishes it): wait for it
    wait_until(lambda: _pipeline(source, target, "app")["agent"]["acked"] == LINES + 1000, 30, "the audit record")
    stages = _pipeline(source, target, "app")
    assert stages["agent"]["acked"] == LINES + 1000
    assert stages["mirror"]["complete_pct"] == round(100.0 * LINES / (LINES + 1000), 2)
