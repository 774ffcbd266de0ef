"""A broker start that fails leaves nothing behind; a full log dir is said at once.

Real broker processes and a real ZooKeeper. The full disk is a real small file system
(a tmpfs of 2 MiB), which only root may mount: the test skips, saying so, otherwise.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker.client import Producer
from broker.common.errors import DiskFullError
from tests.support.brokers import BrokerProcess
from tests.support.metrics import samples, scrape, value
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def _listen(port: int) -> socket.socket:
    """Hold ``127.0.0.1:port`` the way another program would: bound and listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    return sock


def _error_lines(text: str) -> list[str]:
    """Logged errors and the command's own error line (``logferry broker: error: ...``)."""
    return [line for line in text.splitlines() if "ERROR" in line or line.startswith("logferry broker: error: ")]


@pytest.mark.parametrize("taken", ["metrics", "data"])
def test_a_start_on_a_taken_port_fails_in_one_line_and_leaves_nothing_behind(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path, taken: str
) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(1, zk_connect, tmp_path, broker={"metrics_port": metrics_port})
    holder = _listen(metrics_port if taken == "metrics" else broker.port)
    try:
        broker.start(wait=False)
        assert broker.proc is not None
        assert broker.proc.wait(30) == 1
    finally:
        holder.close()
    text = broker.log_text()
    assert "Traceback" not in text and "Event loop is closed" not in text, text
    assert "is the controller" not in text and "registered broker" not in text, text
    (line,) = _error_lines(text)
    port = metrics_port if taken == "metrics" else broker.port
    assert f"127.0.0.1:{port}" in line and "in use" in line, line
    assert zk_client.exists("/brokers/ids/1") is None
    assert zk_client.exists("/controller") is None

    broker.start()  # the port is free now: starts at once, nothing stale to wait for
    try:
        assert zk_client.exists("/brokers/ids/1") is not None
        assert "waiting for stale registration" not in broker.log_text()
    finally:
        assert broker.stop() == 0


@pytest.mark.slow
def test_a_start_refused_by_zookeeper_closes_its_session_and_keeps_the_live_broker(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    """A second broker with a live broker's id gives up (after its 30 s registration
    timeout): it must not delete the live broker's node, and must close its session."""
    live = BrokerProcess(1, zk_connect, tmp_path / "live").start()
    try:
        _, before = zk_client.get("/brokers/ids/1")
        sessions = len(zk_client.get_children("/brokers/ids"))
        twin = BrokerProcess(1, zk_connect, tmp_path / "twin")
        twin.start(wait=False)
        assert twin.proc is not None
        assert twin.proc.wait(60) == 1
        text = twin.log_text()
        assert "Traceback" not in text and "Event loop is closed" not in text, text
        (line,) = _error_lines(text)
        assert "registered by another live process" in line, line
        _, after = zk_client.get("/brokers/ids/1")
        assert after.ephemeralOwner == before.ephemeralOwner  # the live one's, untouched
        assert len(zk_client.get_children("/brokers/ids")) == sessions
    finally:
        assert live.stop() == 0


def test_sigterm_during_the_start_stops_it_at_once_and_cleanly(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    """A stop signal while the start waits (here: for another process's registration of
    the same id, up to 30 s) ends it at once, exit 0, nothing left behind."""
    live = BrokerProcess(1, zk_connect, tmp_path / "live").start()
    try:
        _, before = zk_client.get("/brokers/ids/1")
        twin = BrokerProcess(1, zk_connect, tmp_path / "twin")
        twin.start(wait=False)
        assert twin.proc is not None
        deadline = time.monotonic() + 20
        while "waiting" not in twin.log_text().lower() and time.monotonic() < deadline:
            time.sleep(0.1)  # until it waits on the registration
        started = time.monotonic()
        twin.proc.terminate()
        assert twin.proc.wait(15) == 0
        assert time.monotonic() - started < 10  # not after the 30 s registration timeout
        text = twin.log_text()
        assert "Traceback" not in text and "Event loop is closed" not in text, text
        _, after = zk_client.get("/brokers/ids/1")
        assert after.ephemeralOwner == before.ephemeralOwner
    finally:
        assert live.stop() == 0


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real file system that fills up (needs root to mount)."""
    if os.geteuid() != 0:
        pytest.skip(
            "filling a real small file system needs a tmpfs mount, which needs "
            "root; the unit tests in tests/unit/test_disk_full.py cover the rest"
        )
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): a container without CAP_SYS_ADMIN?")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_log_dir_fails_produce_at_once_and_is_logged_and_counted(
    zk_connect: str, tmp_path: Path, small_filesystem: Path
) -> None:
    log_dir = small_filesystem / "data"
    metrics_port = free_port()
    broker = BrokerProcess(
        1, zk_connect, tmp_path / "w", broker={"metrics_port": metrics_port, "log_dirs": [str(log_dir)]}
    )
    broker.start()
    try:
        with Producer(brokers=[broker.address], linger_ms=0) as producer:
            producer.send("full", b"first", partition=0).wait(20)
            filler = _fill(small_filesystem)
            started = time.monotonic()
            failures = []
            for _ in range(5):
                with pytest.raises(DiskFullError) as caught:
                    producer.send("full", [b"x" * 1000] * 20, partition=0).wait(60)
                failures.append(str(caught.value))
            # at once: not after the producer's 120 s delivery timeout
            assert time.monotonic() - started < 30
            assert failures[0].startswith(f"disk full on broker 1 (log dir {log_dir}): "), failures
            assert "No space left on device" in failures[0]
            parsed = samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
            assert value(parsed, "logferry_produce_disk_full_total", log_dir=str(log_dir)) == 5
            refused = [line for line in broker.log_text().splitlines() if "produce refused" in line]
            assert len(refused) == 1 and "full-0" in refused[0], refused  # rate-limited

            filler.unlink()  # space again: the next produce goes through, no restart
            assert producer.send("full", b"after", partition=0).wait(20) is not None
    finally:
        broker.stop()
