"""ZooKeeper connect strings against a real server (and against none).

- A connect string that points nowhere fails within the connect timeout, as one line
  naming the address, without kazoo's per-attempt warnings (the command line and the
  library).
- A mistyped chroot is not created by read-only commands (``topic list``, ``topic
  describe``, ``consume``, ``group list``, ``group describe``): they say there is no
  cluster there, name the clusters next to it, and exit 1. A broker joining (the
  writer) still creates its chroot.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

from broker.common.errors import ZooKeeperError
from broker.coordination import zk
from tests.support.cli import logferry
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

READ_ONLY = (
    ["topic", "list"],
    ["topic", "describe", "t"],
    ["consume", "t"],
    ["group", "list"],
    ["group", "describe", "g"],
)


_logferry = logferry


@pytest.mark.parametrize("create", [False, True])
def test_nothing_listening_fails_fast_in_one_error(create: bool, caplog: pytest.LogCaptureFixture) -> None:
    where = f"127.0.0.1:{free_port()}/logferry/live"
    # threads of clients other tests left running log too; only this client's count
    others = {t.ident for t in threading.enumerate()} - {threading.get_ident()}
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(ZooKeeperError) as info:
        zk.connect(where, create=create, timeout=1.0)
    assert time.monotonic() - started < 5.0
    assert str(info.value).startswith(f"cannot reach ZooKeeper at {where} within 1s")
    assert "check the host and port" in str(info.value)
    chatter = [r.getMessage() for r in caplog.records if r.name.startswith("kazoo") and r.thread not in others]
    assert chatter == []


def test_the_command_line_gives_up_on_nowhere_within_seconds() -> None:
    where = f"127.0.0.1:{free_port()}/logferry/live"
    started = time.monotonic()
    proc = _logferry("topic", "list", "--zk", where)
    assert time.monotonic() - started < zk.CONNECT_TIMEOUT_S + 10
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"cannot reach ZooKeeper at {where} within 5s" in lines[0]


def test_read_only_commands_leave_a_mistyped_chroot_alone(zookeeper) -> None:
    base = f"/t-{uuid.uuid4().hex[:8]}"
    zk.close(zk.connect(f"{zookeeper.hosts}{base}/live", create=True))  # as a broker does
    typo = f"{zookeeper.hosts}{base}/lvie"
    for argv in READ_ONLY:
        proc = _logferry(*argv, "--zk", typo)
        assert proc.returncode == 1, (argv, proc.stderr)
        assert f"no logferry cluster at {typo}" in proc.stderr, (argv, proc.stderr)
        assert "check the chroot" in proc.stderr
        assert f"clusters nearby: {base}/live" in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = _logferry("topic", "list", "--zk", f"{zookeeper.hosts}{base}")  # one level short
    assert proc.returncode == 1 and f"clusters nearby: {base}/live" in proc.stderr, proc.stderr
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    try:
        assert client.exists(f"{base}/lvie") is None
        assert client.get_children(base) == ["live"]
        assert sorted(client.get_children(f"{base}/live")) == ["brokers", "consumers"]
    finally:
        client.stop()
        client.close()


def test_a_broker_creates_its_chroot_and_clients_then_find_it(zookeeper) -> None:
    where = f"{zookeeper.hosts}/t-{uuid.uuid4().hex[:8]}/new"
    with pytest.raises(ZooKeeperError, match="no logferry cluster at"):
        zk.connect(where, create=False)
    writer = zk.connect(where, create=True)
    try:
        assert writer.exists(zk.BROKER_IDS) and writer.exists(zk.CONSUMERS)
        reader = zk.connect(where, create=False)
        zk.close(reader)
    finally:
        zk.close(writer)
