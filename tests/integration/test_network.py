"""The test network (broker/testing/network.py, tests/support/network.py): hosts as
network namespaces on a bridge, links cut and healed, nothing left behind.

A broker and its ZooKeeper on hosts of their own, a client on a third: the client
reaches the broker over the switch only (the test's own thread, outside every host,
cannot), a cut link makes the broker unreachable, healing brings it back, and the data
sent before, during (refused) and after the cut is counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.client import Admin, Producer, SimpleConsumer, messages_of
from broker.testing.network import Network, namespaces, owner_prefix, pids_in, remove_leftovers, start_time
from tests.support.network import TestNetwork, network_unavailable
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

N = 2_000
"""Messages per round."""


def _reachable(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _produce(zk: str, topic: str, tag: str, count: int, batch: int = 500) -> int:
    """Send ``count`` values with acks=all; returns how many were acknowledged."""
    with Producer(zk=zk, acks="all", linger_ms=5, batch_messages=batch, request_timeout=5.0) as producer:
        sent = []
        for start in range(0, count, batch):
            values = [f"{tag}/{i}".encode() for i in range(start, min(start + batch, count))]
            sent.append((len(values), producer.send(topic, values, partition=0)))
        producer.flush(30)
        acked = 0
        for n, future in sent:
            future.wait(30)  # raises if the batch was not acknowledged
            acked += n
        return acked


def _values(zk: str, topic: str) -> list[bytes]:
    out: list[bytes] = []
    with SimpleConsumer(zk=zk) as consumer:
        offset, end = consumer.offsets(topic, 0)
        while offset < end:
            result = consumer.fetch(topic, 0, offset)
            for batch in result.batches:
                out.extend(m.value for m in messages_of(topic, 0, batch))
            assert result.next_offset > offset, f"no progress at offset {offset} of {end}"
            offset = result.next_offset
    return out


@pytest.mark.timeout(120)
def test_a_broker_on_one_host_serves_a_client_on_another_only_over_the_switch_and_a_cut_stops_it(
    test_network: TestNetwork,
) -> None:
    net = test_network
    net.switch("lan")
    zk_host, broker_host, client = net.host("zk", "lan"), net.host("b1", "lan"), net.host("client", "lan")
    zk = net.zookeeper(zk_host)
    zk_connect = f"{zk.hosts}/net"
    broker = net.broker(broker_host, 1, zk_connect)
    assert broker.address == f"{broker_host.address}:9092"

    # Outside the network (this thread), a TCP connect to 10.77.x may well succeed (this
    # machine's gateway accepts any), but no broker answers there.
    outsider = SimpleConsumer(brokers=[broker.address], request_timeout=2.0, metadata_retries=0)
    with outsider, pytest.raises(Exception):  # noqa: B017,PT011  whichever error: no answer
        outsider.partitions("lines")
    with client.inside():
        assert _reachable(broker_host.address, 9092)
        with Admin(zk=zk_connect) as admin:
            admin.create_topic("lines", partitions=1)
        wait_until(lambda: _leader_known(zk_connect), 20, "the topic's leader")
        acked = _produce(zk_connect, "lines", "before", N)

    net.cut("b1")
    with client.inside():
        assert not _reachable(broker_host.address, 9092), "the broker answered through a cut link"
        producer = Producer(brokers=[broker.address], acks="all", request_timeout=2.0, delivery_timeout=4.0)
        with producer, pytest.raises(Exception):  # noqa: B017,PT011  whichever error: nothing is acknowledged
            producer.send("lines", [b"during/0"], partition=0).wait(10)

    net.heal()
    with client.inside():
        wait_until(lambda: _reachable(broker_host.address, 9092), 20, "the broker reachable again")
        acked += _produce(zk_connect, "lines", "after", N)
        values = _values(zk_connect, "lines")
    expected = [f"before/{i}".encode() for i in range(N)] + [f"after/{i}".encode() for i in range(N)]
    print(f"sent {2 * N}, acknowledged {acked}, received {len(values)}")
    assert acked == 2 * N
    assert values == expected  # everything acknowledged, once, in order; nothing of the cut


def _leader_known(zk_connect: str) -> bool:
    with SimpleConsumer(zk=zk_connect) as consumer:
        try:
            consumer.offsets("lines", 0)
            return True
        except Exception:
            return False


def _links(namespace: str | None = None) -> set[str]:
    """The names of a namespace's interfaces (none: the root namespace's)."""
    where = [] if namespace is None else ["-n", namespace]
    lines = subprocess.run(["ip", *where, "-o", "link"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in lines.splitlines()}


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_two_datacenters_a_router_and_teardown_that_leaves_nothing_behind() -> None:
    net = Network()  # other workers make and delete namespaces meanwhile: count this one's
    try:
        net.switch("dc1")
        net.switch("dc2")
        live, analysis = net.host("live", "dc1"), net.host("ana", "dc2")
        net.router("wan", "dc1", "dc2")
        assert len(net.namespaces()) == 5  # three hosts and two switches
        assert {"br0", "live", "wan"} <= _links(net.switches["dc1"].netns)  # the switch: its bridge and ports
        assert not {"br0", "live", "ana", "wan", "to-dc1", "to-dc2"} & _links()  # none in the root namespace
        with live.inside():  # a server on one datacenter's host, held open by a process there
            server = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import socket,time; s=socket.create_server(('{live.address}', 7000)); time.sleep(60)",
                ]
            )
        assert pids_in(live.netns) == [server.pid]
        with analysis.inside():
            wait_until(lambda: _reachable(live.address, 7000), 10, "the other datacenter over the router")
            net.cut("wan", "dc2")  # the WAN link down
            assert not _reachable(live.address, 7000)
            net.heal()
            wait_until(lambda: _reachable(live.address, 7000), 10, "the WAN back")
            net.block("ana", "live")  # one way: its own sends fail at once
            with pytest.raises(OSError):
                socket.create_connection((live.address, 7000), timeout=1)
            net.heal()
            assert _reachable(live.address, 7000)
    finally:
        net.close()
    assert server.wait(5) == -9  # what still ran on a host is killed with it
    assert not [n for n in namespaces() if n.startswith(net.prefix)]
    assert not {"br0", "live", "ana", "wan", "to-dc1", "to-dc2"} & _links()


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_the_namespaces_of_a_run_that_died_are_removed_and_a_live_runs_kept() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited and reaped: a run that died
    started = start_time(os.getpid())
    assert started is not None
    mine = f"{owner_prefix()}999-x"
    left = f"lf{dead_pid}t12345n0-x"
    # a run that died whose pid this process was given since: same pid, another start
    reused = f"lf{os.getpid()}t{started - 1}n0-x"
    # names without a start time, as older checkouts (other worktrees) still make them
    old_left, old_mine = f"lf{dead_pid}n0-x", f"lf{os.getpid()}n999-x"
    names = (left, mine, reused, old_left, old_mine)
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        orphan = subprocess.Popen(["ip", "netns", "exec", left, "sleep", "60"])
        wait_until(lambda: pids_in(left) == [orphan.pid], 10, "the orphan inside")
        removed = remove_leftovers()  # (another worker's first network may have been first)
        assert mine not in removed and old_mine not in removed
        assert orphan.wait(5) == -9
        assert not {left, reused, old_left} & set(namespaces())
        assert {mine, old_mine} <= set(namespaces())
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


BUILD_AND_DIE = """
import sys, subprocess
from broker.testing.network import Network
net = Network()
net.switch("lan")
host = net.host("a", "lan")
with host.inside():
    child = subprocess.Popen(["sleep", "120"])
print(net.prefix, child.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_a_network_whose_process_was_killed_is_removed_with_what_ran_on_it_and_the_next_one_builds() -> None:
    # A pytest worker killed mid-test (kill -9: no fixture teardown, no atexit), as xdist
    # kills its workers when the run is interrupted: its guard removes what it left.
    with subprocess.Popen(
        [sys.executable, "-c", BUILD_AND_DIE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as worker:
        assert worker.stdout is not None
        prefix, child = worker.stdout.readline().split()
        assert len([n for n in namespaces() if n.startswith(prefix)]) == 2
        worker.kill()
    try:
        wait_until(
            lambda: not [n for n in namespaces() if n.startswith(prefix)], 10, "the killed run's namespaces gone"
        )
        wait_until(lambda: not _running(int(child)), 10, "the killed run's process gone")
        with Network() as net:  # and the next network builds
            net.switch("lan")
            net.host("a", "lan")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), signal.SIGKILL)
        for name in namespaces():
            if name.startswith(prefix):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _echo_server(host_address: str, tag: bytes) -> socket.socket:
    """A listening socket on ``host_address``:7000, in the calling thread's namespace,
    whose accepted connections get ``tag``."""
    server = socket.create_server((host_address, 7000))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(tag)

    threading.Thread(target=serve, daemon=True).start()
    return server


def _ask(address: str) -> bytes:
    with socket.create_connection((address, 7000), timeout=2) as conn:
        return conn.recv(16)


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_two_networks_at_once_with_the_same_names_and_addresses_never_meet() -> None:
    # What the nemeses on several pytest workers rely on: each test's network has the same
    # host names, switch names and addresses, yet lives in namespaces of its own.
    nets = [Network(), Network()]
    servers = []
    try:
        for tag, net in zip((b"one", b"two"), nets, strict=True):
            net.switch("lan")
            srv, net_client = net.host("srv", "lan"), net.host("client", "lan")
            assert (srv.address, net_client.address) == ("10.77.1.1", "10.77.1.2")
            with srv.inside():
                servers.append(_echo_server(srv.address, tag))
        assert nets[0].prefix != nets[1].prefix
        for tag, net in zip((b"one", b"two"), nets, strict=True):
            with net.hosts["client"].inside():
                assert _ask("10.77.1.1") == tag  # its own network's server, never the other's
        nets[0].cut("srv")  # a fault in one network leaves the other alone
        with nets[0].hosts["client"].inside(), pytest.raises(OSError):
            _ask("10.77.1.1")
        with nets[1].hosts["client"].inside():
            assert _ask("10.77.1.1") == b"two"
    finally:
        for server in servers:
            server.close()
        for net in nets:
            net.close()
    assert not [n for n in namespaces() if n.startswith((nets[0].prefix, nets[1].prefix))]


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_the_fixture_tears_down_after_a_failed_and_an_interrupted_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_fails(test_network):
            test_network.switch("lan")
            test_network.host("a", "lan")
            assert len(test_network.namespaces()) == 2
            assert False, "on purpose"

        def test_interrupted(test_network):
            test_network.switch("lan")
            test_network.host("a", "lan")
            raise KeyboardInterrupt
        """
    )
    ours = owner_prefix()  # the inner run's networks: in this process
    assert not [n for n in namespaces() if n.startswith(ours)]
    began = time.monotonic()
    result = pytester.runpytest_inprocess(
        "-p", "tests.support.network", "-p", "no:cacheprovider", no_reraise_ctrlc=True
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: on purpose*"])
    assert not [n for n in namespaces() if n.startswith(ours)], "the fixture left namespaces behind"
    assert time.monotonic() - began < 30
