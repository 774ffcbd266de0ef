"""``logferry hdfs start|status|stop`` with Apache Hadoop's real NameNode and DataNode.

One start of a fresh data dir (format, both servers detached, taking writes), what
``status`` says of it, a second start that finds it running, a start on a port taken
by another process (one line, exit 2, nothing started), and a stop that leaves no
process behind. Files written through the NameNode are the loader's tests'
(tests/loader/test_hdfs_integration.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from broker.cli import hdfs_cmd
from broker.testing import hdfs
from broker.testing.hdfs import LocalHdfs
from tests.support.cli import logferry
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def data_dir(tmp_path: Path):
    """A data dir whose servers are killed after the test, whatever it did."""
    if not hdfs.JARS.resolved():
        pytest.skip(hdfs.JARS.missing_reason())
    directory = tmp_path / "hdfs"
    yield directory
    LocalHdfs.from_data_dir(directory).kill()


def test_start_status_stop(data_dir: Path):
    port, http_port = free_port(), free_port()
    args = ("--data-dir", str(data_dir))
    started = logferry("hdfs", "start", *args, "--port", str(port), "--http-port", str(http_port), timeout=180)
    assert started.returncode == 0, started.stderr
    assert f"HDFS started: hdfs://127.0.0.1:{port} (NameNode pid " in started.stdout
    server = LocalHdfs.from_data_dir(data_dir)
    pids = server.pids()
    assert all(pids.values()) and server.formatted()
    assert server.log_path("namenode").stat().st_size > 0 and server.log_path("datanode").stat().st_size > 0

    status = logferry("hdfs", "status", *args)
    assert status.returncode == 0, status.stderr
    assert f"uri: hdfs://127.0.0.1:{port}" in status.stdout
    assert "live DataNodes: 1" in status.stdout and "safe mode: off" in status.stdout
    assert f"namenode: pid {pids['namenode']}" in status.stdout and f"version: {hdfs.HADOOP_VERSION}" in status.stdout

    again = logferry("hdfs", "start", *args)
    assert again.returncode == 0 and "HDFS already running" in again.stdout
    assert LocalHdfs.from_data_dir(data_dir).pids() == pids

    stopped = logferry("hdfs", "stop", *args)
    assert stopped.returncode == 0 and "HDFS stopped" in stopped.stdout
    assert LocalHdfs.from_data_dir(data_dir).pids() == {"namenode": None, "datanode": None}
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or "java" not in Path(f"/proc/{pid}/cmdline").read_text()
    status = logferry("hdfs", "status", *args)
    assert status.returncode == hdfs_cmd.EXIT_NOT_RUNNING and "HDFS: not running" in status.stdout


def test_port_taken_is_one_line_and_exit_2(data_dir: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = logferry("hdfs", "start", "--data-dir", str(data_dir), "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"logferry hdfs start: error: port {port} on 127.0.0.1 is already in use; choose another port"
    ]
    assert LocalHdfs.from_data_dir(data_dir).pids() == {"namenode": None, "datanode": None}
