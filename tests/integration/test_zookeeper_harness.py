"""The ZooKeeper test harness against the real server: chroots, stop/kill/start keeping
data, session expiry on purpose, and the ``logferry zk`` daemon across processes."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from tests.support.cli import logferry
from tests.support.ports import free_port
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperHarness, expire_session

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def _root_client(zookeeper: ZooKeeperHarness) -> KazooClient:
    """A client without chroot, to look at the tree from outside a test's chroot."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10.0)
    client.start(timeout=15)
    return client


def _record_states(client: KazooClient) -> list[KazooState]:
    states: list[KazooState] = []
    client.add_listener(states.append)
    return states


def test_each_test_gets_its_own_chroot(zookeeper, zk_connect, zk_client):
    assert re.fullmatch(rf"127\.0\.0\.1:{zookeeper.port}/t-[0-9a-f]{{8}}", zk_connect)
    assert zk_client.get_children("/") == []
    zk_client.create("/brokers/ids/1", b'{"port": 1}', makepath=True)
    assert zk_client.get("/brokers/ids/1")[0] == b'{"port": 1}'

    chroot = zk_connect.partition("/")[2]
    root = _root_client(zookeeper)
    try:
        assert root.get(f"/{chroot}/brokers/ids/1")[0] == b'{"port": 1}'
        other = zookeeper.new_chroot().partition("/")[2]
        assert other != chroot
        assert root.get_children(f"/{other}") == []
    finally:
        root.stop()
        root.close()


def test_stop_then_start_keeps_port_data_and_sessions(zookeeper, zk_client):
    zk_client.create("/kept", b"persistent")
    zk_client.create("/mine", b"ephemeral", ephemeral=True)
    session = zk_client.client_id[0]
    states = _record_states(zk_client)
    port = zookeeper.port

    zookeeper.stop()
    assert not zookeeper.is_running()
    wait_until(lambda: KazooState.SUSPENDED in states, what="the client to see SUSPENDED")
    zookeeper.start()

    assert zookeeper.port == port
    wait_until(lambda: zk_client.connected, timeout=20, what="the client to reconnect")
    assert zk_client.get("/kept")[0] == b"persistent"
    # The server keeps sessions across a restart; the client is back within its timeout.
    assert zk_client.client_id[0] == session
    assert zk_client.get("/mine")[0] == b"ephemeral"
    assert KazooState.LOST not in states


def test_kill_9_loses_nothing_written(zookeeper, zk_connect, zk_client):
    zk_client.create("/before-crash", b"x" * 1000)
    zookeeper.kill()
    assert not zookeeper.is_running()
    zookeeper.start()
    fresh = KazooClient(hosts=zk_connect, timeout=10.0)
    fresh.start(timeout=15)
    try:
        assert fresh.get("/before-crash")[0] == b"x" * 1000
    finally:
        fresh.stop()
        fresh.close()


def test_expire_session_ends_it_on_the_server(zookeeper, zk_connect, zk_client):
    zk_client.create("/owner", b"me", ephemeral=True)
    old_session = zk_client.client_id[0]
    states = _record_states(zk_client)
    observer = KazooClient(hosts=zk_connect, timeout=10.0)
    observer.start(timeout=15)
    try:
        assert observer.exists("/owner") is not None
        expire_session(zk_client)
        assert KazooState.LOST in states
        wait_until(lambda: observer.exists("/owner") is None, what="the ephemeral node to vanish")
    finally:
        observer.stop()
        observer.close()
    wait_until(lambda: zk_client.connected, timeout=20, what="kazoo to open a new session")
    assert zk_client.client_id[0] != old_session
    assert zk_client.exists("/owner") is None


def test_expire_session_needs_a_connected_client(zookeeper):
    client = KazooClient(hosts=zookeeper.hosts)
    with pytest.raises(RuntimeError, match="connected client"):
        expire_session(client)


LEFT_STOPPED = """
import pytest

pytestmark = pytest.mark.integration
PORTS = []


def test_a_test_may_leave_zookeeper_stopped(zookeeper):
    PORTS.append(zookeeper.port)
    zookeeper.stop()  # and "forget" to start it: the harness must recover
    assert not zookeeper.is_running()


def test_the_next_test_finds_it_running_again(zookeeper, zk_client):
    assert zookeeper.is_running()
    assert zookeeper.port == PORTS[0]
    assert zk_client.exists("/") is not None
"""


def test_a_test_that_leaves_zookeeper_stopped_does_not_break_the_next(pytester):
    """Two tests in a session of their own (with its own ZooKeeper): the first stops
    the server and ends; the harness must have it running, on the same port, for the
    second. One test here, so the pair cannot be split or reordered."""
    pytester.makeconftest('pytest_plugins = ["tests.support.zookeeper"]')
    pytester.makepyfile(test_left_stopped=LEFT_STOPPED)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2)


def _zk_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``logferry zk ...`` in a separate process, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.zk_cmd", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )


def test_zk_command_runs_a_daemon_found_by_later_commands(tmp_path):
    data_dir = str(tmp_path / "zk")
    port = str(free_port())
    try:
        started = _zk_cli("start", "--port", port, "--data-dir", data_dir)
        assert started.returncode == 0, started.stderr
        assert f"127.0.0.1:{port}" in started.stdout

        status = _zk_cli("status", "--data-dir", data_dir)  # the port comes from zoo.cfg
        assert status.returncode == 0, status.stdout + status.stderr
        assert "mode: standalone" in status.stdout and f"127.0.0.1:{port}" in status.stdout

        again = _zk_cli("start", "--data-dir", data_dir)
        assert again.returncode == 0 and "already running" in again.stdout

        stopped = _zk_cli("stop", "--data-dir", data_dir)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        assert _zk_cli("status", "--data-dir", data_dir).returncode == 3
    finally:
        _zk_cli("stop", "--data-dir", data_dir)


def test_zk_command_runs_an_ensemble_that_outlives_a_member(tmp_path):
    """``logferry zk start --ensemble 3``: a real quorum (one leader, two followers) on
    three loopback addresses; data written through it survives the leader's kill -9,
    the two left keep taking writes, one member alone is no quorum (status says so,
    exit 1), and ``start`` again brings back only the missing members."""
    data_dir = str(tmp_path / "ens")
    port = str(free_port())
    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"  # beside any other ensemble
    try:
        started = logferry(
            "zk",
            "start",
            "--ensemble",
            "3",
            "--ensemble-prefix",
            prefix,
            "--port",
            port,
            "--data-dir",
            data_dir,
            as_process=True,
        )
        assert started.returncode == 0, started.stderr
        connect = ",".join(f"{prefix}.{i}:{port}" for i in (1, 2, 3))
        assert f"connect {connect}" in started.stdout

        status = logferry("zk", "status", "--data-dir", data_dir)
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count("leader") == 1 and status.stdout.count("follower") == 2

        client = KazooClient(hosts=connect, timeout=10)
        client.start(timeout=15)
        try:
            client.create("/kept", b"before")
            leader = re.search(r"member (member-\d): \S+, pid (\d+), leader", status.stdout)
            assert leader is not None, status.stdout
            os.kill(int(leader.group(2)), signal.SIGKILL)
            wait_until(lambda: logferry("zk", "status", "--data-dir", data_dir).stdout.count("leader") == 1, 30)
            client.set("/kept", b"after")  # two of three: still a quorum, still writes
            assert client.get("/kept")[0] == b"after"
        finally:
            client.stop()
            client.close()

        follower = re.search(
            r"member (member-\d): \S+, pid (\d+), follower", logferry("zk", "status", "--data-dir", data_dir).stdout
        )
        assert follower is not None
        os.kill(int(follower.group(2)), signal.SIGKILL)
        alone = logferry("zk", "status", "--data-dir", data_dir)
        assert alone.returncode == 1 and "quorum NO" in alone.stdout, alone.stdout + alone.stderr

        again = logferry("zk", "start", "--data-dir", data_dir, as_process=True)
        assert again.returncode == 0 and "2 member(s) started again" in again.stdout, again.stdout + again.stderr
        client = KazooClient(hosts=connect, timeout=10)
        client.start(timeout=15)
        try:
            assert client.get("/kept")[0] == b"after"
        finally:
            client.stop()
            client.close()

        assert logferry("zk", "start", "--data-dir", data_dir, "--ensemble", "5").returncode == 2
        stopped = logferry("zk", "stop", "--data-dir", data_dir)
        assert stopped.returncode == 0 and "ensemble stopped" in stopped.stdout
        assert logferry("zk", "status", "--data-dir", data_dir).returncode == 3
    finally:
        logferry("zk", "stop", "--data-dir", data_dir)
