"""``logferry zk start --ensemble 3``: three ZooKeeper members on loopback, a real quorum.

Run inside a host of the test network (tests/support/network.py): the host's own
loopback makes 127.0.0.1-3 and the quorum ports 2888 and 3888 this test's alone, however
many other tests or engineers run a ZooKeeper on this machine; the network's teardown
kills the detached members if the test fails before ``zk stop``. ``zk start`` runs as a
process, as a user runs it: the members it detaches outlive it (in process, the test
would hold their ``Popen`` objects and pytest would warn they still run).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.cli.zk_cmd import member_dir
from broker.testing.zkserver import LocalZooKeeper
from tests.support.cli import logferry
from tests.support.network import TestNetwork

pytestmark = pytest.mark.integration

CONNECT = "127.0.0.1:2181,127.0.0.2:2181,127.0.0.3:2181"


@pytest.mark.timeout(240)
def test_zk_start_ensemble_runs_a_quorum_that_outlives_its_leader(test_network: TestNetwork, tmp_path: Path) -> None:
    test_network.switch("lan")
    host = test_network.host("zk", "lan")
    data_dir = tmp_path / "zk"
    common = ("--data-dir", str(data_dir))
    with host.inside():
        started = logferry("zk", "start", "--ensemble", "3", *common, timeout=120, as_process=True)
        try:
            assert started.returncode == 0, started.stderr
            assert f"connect string: {CONNECT}" in started.stdout
            status = logferry("zk", "status", *common)
            assert status.returncode == 0, status.stdout + status.stderr
            modes = re.findall(r"127\.0\.0\.(\d):2181: pid \d+, (\w+)", status.stdout)
            assert sorted(mode for _, mode in modes) == ["follower", "follower", "leader"], status.stdout

            # One ensemble: what one member takes, another serves.
            writer, reader = KazooClient("127.0.0.1:2181"), KazooClient("127.0.0.3:2181")
            for client in (writer, reader):
                client.start(timeout=10)
            try:
                writer.create("/ensemble-check", b"quorum")
                reader.sync("/ensemble-check")
                assert reader.get("/ensemble-check")[0] == b"quorum"
            finally:
                for client in (writer, reader):
                    client.stop()
                    client.close()

            # Its leader killed: the other two elect one of themselves and go on serving.
            leader = next(int(n) for n, mode in modes if mode == "leader")
            LocalZooKeeper.from_data_dir(member_dir(data_dir, leader)).kill()
            survivors = [n for n in (1, 2, 3) if n != leader]
            client = KazooClient(",".join(f"127.0.0.{n}:2181" for n in survivors))
            client.start(timeout=30)
            try:
                assert client.get("/ensemble-check")[0] == b"quorum"
            finally:
                client.stop()
                client.close()
            degraded = logferry("zk", "status", *common)
            assert degraded.returncode == 1 and "2 of 3 members serve (a quorum serves)" in degraded.stderr
            assert f"127.0.0.{leader}:2181: not running" in degraded.stdout
        finally:
            stopped = logferry("zk", "stop", *common)
            assert stopped.returncode == 0, stopped.stderr
        assert logferry("zk", "status", *common).returncode == 3
