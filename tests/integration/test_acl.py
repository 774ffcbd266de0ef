"""ACLs against a real broker and a real ZooKeeper, managed with ``logferry acl``.

Authentication is another piece of work: every connection here is ``User:ANONYMOUS``,
so the rules are written for it (and for ``*``); the handlers' tests
(tests/unit/test_authorizer.py) cover other principals. The broker runs with
``[authorizer] enabled = true``: nothing is allowed until an ACL allows it, a refusal
names the principal, operation and resource, nothing is appended, the denial is counted
in ``authorization_denied_total`` and logged, and ``acl add|remove`` take effect on the
running broker without a restart.
"""

from __future__ import annotations

import subprocess

import pytest

from broker.client import Admin, Producer, SimpleConsumer
from broker.common.config import dumps
from broker.common.errors import TopicAuthorizationFailedError
from broker.testing.localrun import free_port
from tests.support.cli import logferry
from tests.support.metrics import samples, scrape, value
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def acl(zk: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``logferry acl ...`` against the test's cluster."""
    result = logferry("acl", *args, "--zk", zk)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def _secured_broker(broker_cluster, metrics_port: int, cluster=None, **settings):
    cluster = cluster or broker_cluster(0)
    broker = cluster.add({"metrics_port": metrics_port, "num_partitions": 1, **settings}, start=False)
    text = broker.config_file.read_text()
    broker.config_file.write_text(text + "\n" + dumps({"authorizer": {"enabled": True, "super_users": ["User:admin"]}}))
    broker.start()
    return cluster, broker


def _produce(zk: str, topic: str) -> None:
    with Producer(zk=zk, acks=1, linger_ms=0, retries=5) as producer:
        producer.send(topic, b"x", partition=0).wait(20)


@pytest.mark.slow
def test_acls_decide_what_anonymous_may_do_and_changes_apply_without_restart(broker_cluster, zk_connect) -> None:
    metrics_port = free_port()
    cluster, broker = _secured_broker(broker_cluster, metrics_port)
    zk = cluster.zk_connect

    # deny by default: even creating a topic is refused, with the reason
    with (
        Admin(zk=zk) as admin,
        pytest.raises(TopicAuthorizationFailedError, match="User:ANONYMOUS may not create on topic 'a'"),
    ):
        admin.create_topic("a")

    out = acl(
        zk,
        "add",
        "--principal",
        "User:ANONYMOUS",
        "--operation",
        "create",
        "--operation",
        "produce",
        "--topic",
        "a",
        "--allow",
    ).stdout
    assert "added: allow  User:ANONYMOUS  produce  topic 'a'" in out
    acl(zk, "add", "--principal", "*", "--operation", "create", "--topic-prefix", "b", "--allow")
    acl(zk, "add", "--principal", "*", "--operation", "consume", "--topic", "*", "--allow")
    listed = acl(zk, "list").stdout.splitlines()
    assert "allow  *  create  topic-prefix 'b'" in listed and len(listed) == 4

    with Admin(zk=zk) as admin:
        wait_until(lambda: _created(admin, "a"), timeout=10, what="create allowed by the new ACL")
        admin.create_topic("b")
        admin.create_topic("b-hidden")
    _produce(zk, "a")

    # produce to b: describe (implied by create) passes, produce is refused at once
    with Producer(zk=zk, acks=1, linger_ms=0, retries=5) as producer:
        with pytest.raises(TopicAuthorizationFailedError) as refused:
            producer.send("b", b"y", partition=0).wait(20)
        assert producer.metrics()["retries"] == 0
    assert "User:ANONYMOUS may not produce on topic 'b'" in str(refused.value)
    assert "logferry acl add" in str(refused.value)
    with SimpleConsumer(zk=zk) as consumer:  # nothing appended
        assert consumer.offsets("b", 0).end == 0
        assert [m.value for m in consumer.messages("a", 0)] == [b"x"]

    parsed = samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
    assert value(parsed, "logferry_authorization_denied_total", operation="produce", resource_type="topic") == 1
    assert value(parsed, "logferry_messages_in_total", topic="b", partition="0") in (None, 0)
    assert "authorizer: denied User:ANONYMOUS produce on topic 'b'" in broker.log_text()

    # a deny of describe hides a topic (consume on '*' implied describe); a removed ACL
    # refuses the next produce
    acl(zk, "remove", "--principal", "*", "--operation", "create", "--topic-prefix", "b", "--allow")
    acl(zk, "add", "--principal", "*", "--operation", "describe", "--topic", "b-hidden", "--deny")
    acl(zk, "remove", "--principal", "User:ANONYMOUS", "--operation", "produce", "--topic", "a", "--allow")
    with Admin(zk=zk) as admin:
        wait_until(lambda: admin.list_topics() == ["a", "b"], timeout=10, what="b-hidden leaving the listing")
    with pytest.raises(TopicAuthorizationFailedError, match="may not produce on topic 'a'"):
        _produce(zk, "a")

    missing = acl(
        zk, "remove", "--principal", "User:ANONYMOUS", "--operation", "delete", "--topic", "a", "--allow", check=False
    )
    assert missing.returncode == 2
    assert (
        "no such ACL: allow User:ANONYMOUS delete on topic 'a'; its ACLs: allow User:ANONYMOUS create on topic 'a'"
    ) in missing.stderr
    assert broker.proc is not None and broker.proc.poll() is None


@pytest.mark.slow
def test_followers_replicate_only_with_alter_on_the_cluster(broker_cluster) -> None:
    """Brokers that do not authenticate to each other are User:ANONYMOUS: a follower's
    fetch is refused until that principal may alter the cluster (docs/security.md)."""
    lag = {"replica_lag_time_max_ms": 1000, "acks_all_timeout_ms": 3000}
    cluster, _ = _secured_broker(broker_cluster, free_port(), **lag)
    _secured_broker(broker_cluster, free_port(), cluster=cluster, **lag)
    zk = cluster.zk_connect
    acl(zk, "add", "--principal", "*", "--operation", "create", "--operation", "produce", "--topic", "r", "--allow")
    with Admin(zk=zk) as admin:
        wait_until(lambda: _created(admin, "r", replication_factor=2), timeout=10, what="create allowed")
        wait_until(lambda: "r" in admin.under_replicated(), timeout=20, what="the refused follower leaving the ISR")
        assert "may not alter on cluster" in "".join(b.log_text() for b in cluster.brokers)
        acl(zk, "add", "--principal", "User:ANONYMOUS", "--operation", "alter", "--cluster", "--allow")
        wait_until(
            lambda: "r" not in admin.under_replicated(),
            timeout=20,
            what="the follower back in the ISR once it may alter the cluster",
        )
    with Producer(zk=zk, acks="all", linger_ms=0) as producer:
        producer.send("r", b"replicated", partition=0).wait(20)


def _created(admin: Admin, name: str, **options: int) -> bool:
    try:
        admin.create_topic(name, **options)
        return True
    except TopicAuthorizationFailedError:
        return False


def test_bad_acl_input_is_refused_before_zookeeper() -> None:
    for args, message in (
        (
            ["--principal", "alice", "--operation", "produce", "--topic", "t", "--allow"],
            "a principal is written 'User:<name>'",
        ),
        (["--principal", "User:a", "--operation", "write", "--topic", "t", "--allow"], "unknown operation 'write'"),
        (
            ["--principal", "User:a", "--operation", "produce", "--cluster", "--allow"],
            "operation produce does not apply to the cluster",
        ),
        (["--principal", "User:a", "--operation", "produce", "--topic", "a/b", "--deny"], "invalid topic name 'a/b'"),
    ):
        result = acl("127.0.0.1:1/nowhere", "add", *args, check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
