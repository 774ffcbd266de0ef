"""The test network as a fixture: hosts (network namespaces) on switches, with the
ZooKeepers and brokers a test starts on them, all torn down after the test.

``test_network`` yields a :class:`TestNetwork` (a :class:`broker.testing.network.Network`)
that also starts servers on its hosts and stops them before it deletes the namespaces,
whether the test passed, failed or was interrupted (pytest tears fixtures down on
Ctrl-C too; a process that dies outright leaves namespaces named after its pid, which
:func:`broker.testing.network.remove_leftovers` deletes the first time a later run
asks for a network). Needs root and ``ip`` (iproute2): the tests skip, saying so,
without them. Clients run on a host inside ``with host.inside():``: the client library's
sockets and threads are made there, and reach the brokers over the switch only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from broker.testing.localrun import DEFAULT_PORT
from broker.testing.network import Host, Network, NetworkError, remove_leftovers
from broker.testing.zkserver import LocalZooKeeper
from tests.support.brokers import BrokerProcess

ZK_PORT = 2181
"""ZooKeeper's port on its host (a host of its own: nothing else listens there)."""
START_TIMEOUT = 120.0
"""How long a ZooKeeper (or an ensemble) may take to serve. A few seconds alone; the
nemeses start theirs on several workers at once, and on a machine loaded about 25 some
took over 30 s (a standalone server) and 60 s (an ensemble)."""
_swept = False


def network_unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "the test network needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "the test network needs iproute2's `ip`"
    return None


class TestNetwork(Network):
    """A :class:`Network` that starts ZooKeepers and brokers on its hosts and stops them
    (SIGTERM, then kill) before deleting the namespaces."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self.zookeepers: list[LocalZooKeeper] = []
        self.brokers: list[BrokerProcess] = []

    def zookeeper(self, host: Host, timeout: float = START_TIMEOUT) -> LocalZooKeeper:
        """A standalone ZooKeeper on ``host`` at ``<address>:2181``, started and serving."""
        server = LocalZooKeeper(self.workdir / f"zk-{host.name}", ZK_PORT, host.address, force_sync=False)
        self.zookeepers.append(server)
        with host.inside():  # the JVM, and the readiness probe, on that host
            server.start(timeout)
        return server

    def zookeeper_ensemble(self, hosts: list[Host], timeout: float = START_TIMEOUT) -> list[LocalZooKeeper]:
        """A ZooKeeper ensemble, one member per host (``myid`` 1, 2, ... in order), each
        at ``<address>:2181``; returns once every member serves (a quorum formed and each
        joined it). Their connect string: ``",".join(z.hosts for z in servers)``."""
        peers = [(i, host.address) for i, host in enumerate(hosts, 1)]
        servers = []
        for (myid, _), host in zip(peers, hosts, strict=True):
            server = LocalZooKeeper(
                self.workdir / f"zk-{host.name}", ZK_PORT, host.address, force_sync=False, peers=peers, myid=myid
            )
            self.zookeepers.append(server)
            with host.inside():  # no member serves before a quorum runs: start all, then wait
                server.start(wait=False)
            servers.append(server)
        for server, host in zip(servers, hosts, strict=True):
            with host.inside():
                server.wait_ready(timeout)
        return servers

    def broker(self, host: Host, broker_id: int, zk_connect: str, start: bool = True, **settings: Any) -> BrokerProcess:
        """A broker on ``host`` (binds and advertises its address, port 9092) with the
        suite's test settings; ``settings``: ``broker``, ``log``, ``kafka`` tables."""
        process = BrokerProcess(
            broker_id,
            zk_connect,
            self.workdir / f"broker-{host.name}",
            host=host.address,
            port=DEFAULT_PORT,
            netns=host.netns,
            **settings,
        )
        self.brokers.append(process)
        if start:
            process.start()
        return process

    def logs(self) -> str:
        parts = [f"--- {b.name} on {b.address} ({b.log_file}) ---\n{b.log_tail(60)}" for b in self.brokers]
        parts += [f"--- ZooKeeper on {z.hosts} ---\n{z.log_tail(30)}" for z in self.zookeepers]
        return "\n".join(parts)

    def close(self) -> None:
        """Stop the brokers and ZooKeepers, then delete the namespaces (see :class:`Network`)."""
        try:
            self.heal()  # a cut broker stops cleanly: SIGTERM needs no network, its ZooKeeper does
        except NetworkError as exc:  # tear down all the same
            print(f"test network: could not heal before stopping: {exc}")
        for broker in self.brokers:
            try:
                broker.stop(timeout=10.0)
            except Exception:
                broker.kill()
        for server in self.zookeepers:
            server.stop()
        self.brokers.clear()
        self.zookeepers.clear()
        super().close()


@contextmanager
def _network(workdir: Path) -> Iterator[TestNetwork]:
    """A fresh :class:`TestNetwork` in ``workdir``, closed (everything on it stopped and
    deleted) when the block ends, however it ends; skips without root."""
    global _swept
    reason = network_unavailable()
    if reason:
        pytest.skip(reason)
    if not _swept:  # once per worker: what a run that died left behind
        _swept = True
        left = remove_leftovers()
        if left:
            print(f"test network: removed {len(left)} namespaces of a run that died: {', '.join(left)}")
    net = TestNetwork(workdir)
    try:
        yield net
    finally:
        net.close()


@pytest.fixture
def test_network(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestNetwork]:
    """A fresh :class:`TestNetwork`; everything on it stopped and deleted after the test."""
    with _network(tmp_path / "net") as net:
        try:
            yield net
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed:
                print(net.logs())


@pytest.fixture(scope="module")
def module_test_network(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[TestNetwork]:
    """A :class:`TestNetwork` shared by a module's tests (their expensive servers started
    once); stopped and deleted after the module's last test, the servers' logs printed
    when one of its tests failed. The tests run one after another on one worker
    (tests/support/parallel.py), so each may cut and heal it; each heals before it ends."""
    failed_before = request.session.testsfailed
    with _network(tmp_path_factory.mktemp("net")) as net:
        try:
            yield net
        finally:
            if request.session.testsfailed > failed_before:
                print(net.logs())
