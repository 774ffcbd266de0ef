"""A real HDFS for the tests: Apache Hadoop's NameNode and DataNode (broker.testing.hdfs).

``hdfs`` is one HDFS per test module (module scope): its two JVMs start in 10-20 s on a
busy machine, so a module shares one and each test writes below a directory of its own
(``hdfs_dir``). A test that stops, kills or restarts a server of it restarts that
server before it ends. Without Hadoop's jars (``make hadoop-jars``) or Java the tests
that use it skip, saying why in one line. When a test fails, the tail of both servers'
logs is printed under it.
"""

from __future__ import annotations

import atexit
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.testing.hdfs import JARS, HdfsNotInstalledError, LocalHdfs, discover_install, start_on_free_ports
from tests.support import register_log_source, unregister_log_source

START_TIMEOUT = 120.0


class _Logs:
    """Both servers' log tails as one log source for failure reports."""

    def __init__(self, hdfs: LocalHdfs) -> None:
        self.hdfs = hdfs

    def log_tail(self, lines: int) -> str:
        return "\n".join(
            f"--- {role} ({self.hdfs.log_path(role)}) ---\n{self.hdfs.log_tail(role, lines // 2)}"
            for role in ("namenode", "datanode")
        )


def start_hdfs(base_dir: Path, attempts: int = 3) -> LocalHdfs:
    """A started HDFS on free ports in ``base_dir`` (a port taken meanwhile: next ports)."""
    return start_on_free_ports(base_dir / "hdfs", START_TIMEOUT, attempts=attempts)


@pytest.fixture(scope="module")
def hdfs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHdfs]:
    """This module's real HDFS, started and taking writes; stopped at the module's end."""
    try:
        discover_install()
    except HdfsNotInstalledError as exc:
        pytest.skip(str(exc) if JARS.resolved() else JARS.missing_reason())
    server = start_hdfs(tmp_path_factory.mktemp("hdfs"))
    atexit.register(server.kill)  # if pytest dies before teardown, leave no JVM behind
    register_log_source(request.config, "hdfs", _Logs(server), fixture="hdfs", title=f"HDFS logs {server.log_dir}")
    try:
        yield server
    finally:
        unregister_log_source(request.config, "hdfs")
        server.stop()
        atexit.unregister(server.kill)


@pytest.fixture
def hdfs_dir(hdfs: LocalHdfs) -> str:
    """``hdfs://127.0.0.1:PORT/t-<8 hex>``: a directory of this test only (not created)."""
    return f"{hdfs.uri}/t-{uuid.uuid4().hex[:8]}"
