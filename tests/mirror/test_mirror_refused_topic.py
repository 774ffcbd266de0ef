"""A mirror whose principal lacks the target's ACL for one of its topics halts that topic
only (mirror/refusals.py): one log line naming principal, operation and topic, the other
topics copied exactly, and the refused one copied in full once ``logferry acl add``
allows it, without a restart. Real brokers: the source open, the target with the
authorizer on (every client there is ``User:ANONYMOUS``, as in tests/integration/test_acl.py).
"""

from __future__ import annotations

import pytest

from broker.common.config import dumps
from tests.mirror.conftest import assert_mirrored, create, mirrored, produce, topic_messages, wait_for
from tests.support.cli import logferry

pytestmark = pytest.mark.integration

N, M, MORE = 2_000, 1_500, 700


def _acl(zk: str, *args: str) -> None:
    done = logferry("acl", "add", "--zk", zk, "--principal", "User:ANONYMOUS", *args, "--allow")
    assert done.returncode == 0, done.stderr


def _target(broker_cluster, zookeeper):
    target = broker_cluster(0, zk=zookeeper.new_chroot())
    broker = target.add({"num_partitions": 2}, start=False)
    broker.config_file.write_text(
        broker.config_file.read_text() + "\n" + dumps({"authorizer": {"enabled": True, "super_users": ["User:admin"]}})
    )
    broker.start()
    # the mirror may create and write "open"; the test reads everything; "secret": nothing
    _acl(target.zk_connect, "--operation", "create", "--operation", "produce", "--topic", "open")
    _acl(target.zk_connect, "--operation", "consume", "--topic", "*")
    return target


@pytest.mark.parametrize("mode", ["preserve", "produce"])
@pytest.mark.parametrize("missing", ["create", "produce"])
def test_a_refused_topic_halts_alone_and_resumes_once_allowed(
    broker_cluster, zookeeper, mirrors, mode: str, missing: str
) -> None:
    """``missing``: the operation the mirror lacks on "secret" (creating the target topic,
    or writing it once it may create it: its appends are refused)."""
    source = broker_cluster(1, zk=zookeeper.new_chroot())
    target = _target(broker_cluster, zookeeper)
    if missing == "produce":
        _acl(target.zk_connect, "--operation", "create", "--topic", "secret")
    create(source.zk_connect, "open", 2)
    create(source.zk_connect, "secret", 2)
    produce(source.zk_connect, "open", N, 2)
    produce(source.zk_connect, "secret", M, 2)
    for topic, count in (("open", N), ("secret", M)):
        wait_for(lambda t=topic, n=count: topic_messages(source.zk_connect, t) == n, 30, f"the source to show {topic}")

    mirror = mirrors("m", source, target, topics=["open", "secret"], mode=mode, refused_retry_s=1.0, audit_topic="")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "open", exact=True), 60, "the allowed topic to be copied"
    )
    assert topic_messages(target.zk_connect, "open") == N
    # the refused topic: nothing copied; the mirror runs on, and says so once
    assert mirror.alive(), mirror.log_tail()
    produce(source.zk_connect, "open", MORE, 2)
    wait_for(
        lambda: topic_messages(source.zk_connect, "open") == N + MORE, 30, "the source to show the new messages"
    )  # acked before visible (flush)
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "open", exact=True),
        60,
        "the allowed topic to keep flowing",
    )
    assert topic_messages(target.zk_connect, "open") == N + MORE
    assert topic_messages(target.zk_connect, "secret") == 0
    log = mirror.log_file.read_text()
    refused = [line for line in log.splitlines() if "MIRROR TOPIC REFUSED" in line]
    assert len(refused) == 1, log
    assert "User:ANONYMOUS" in refused[0] and "'secret'" in refused[0], refused[0]
    assert f"may not {missing} on topic 'secret'" in refused[0], refused[0]
    assert "Traceback" not in log and "giving up" not in log, log
    wait_for(lambda: "secret" in mirror.status().get("refused", {}), 10, "the status file to name the refused topic")

    # granted: the refused topic is copied in full, without a restart
    _acl(target.zk_connect, "--operation", "create", "--operation", "produce", "--topic", "secret")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "secret", exact=True),
        60,
        "the refused topic to be copied once allowed",
    )
    assert_mirrored(source.zk_connect, target.zk_connect, "secret", exact=True)
    assert topic_messages(target.zk_connect, "secret") == M
    assert topic_messages(target.zk_connect, "open") == N + MORE
    wait_for(
        lambda: "secret" not in mirror.status().get("refused", {"secret": 1}), 10, "the status to drop the refusal"
    )
    assert mirror.terminate() == 0
