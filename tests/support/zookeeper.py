"""One real ZooKeeper for the whole test session, a chroot per test, and failure helpers.

A pytest plugin (listed in ``tests/conftest.py``). Fixtures:

``zookeeper`` (session)
    A :class:`ZooKeeperHarness` around one :class:`broker.testing.zkserver.LocalZooKeeper`
    (Debian's server, a free port of 127.0.0.1, a temp data dir), started on first use
    and stopped at the end of the session even when tests fail. Failure tests may
    ``stop()``, ``kill()`` and ``start()`` it (same port, same data); if a test leaves it
    down, it is started again before the next test.
``zk_connect`` (function)
    ``"127.0.0.1:PORT/t-<8 hex>"``: a connect string with a fresh chroot, created
    beforehand since kazoo does not create chroots. Tests never see each other's znodes.
``zk_client`` (function)
    A started ``KazooClient`` on ``zk_connect``, stopped and closed after the test.

And :func:`expire_session`, which ends a client's session on the server the way a
long network partition would.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from broker.testing.zkserver import LocalZooKeeper, ServerTls, ZooKeeperStartError
from tests.support import register_log_source, unregister_log_source
from tests.support.pki import Pki, make_pki
from tests.support.ports import free_port

START_TIMEOUT = 60.0
"""Seconds to wait for the JVM to serve (about 1 s on a quiet machine; CI may be slow)."""
START_ATTEMPTS = 3
"""Ports tried when the first free port is taken between picking and binding it."""
CLIENT_TIMEOUT = 15.0
"""Seconds a harness kazoo client waits to connect."""

_HARNESS = pytest.StashKey["ZooKeeperHarness"]()
_SUMMARY = pytest.StashKey[str]()


class ZooKeeperHarness:
    """The session's ZooKeeper, with what tests may do to it.

    ``hosts`` is ``127.0.0.1:PORT`` without chroot; :meth:`new_chroot` gives a test
    its own connect string. ``stop``/``kill``/``start`` keep the port and the data, so
    clients reconnect to the same address and find their znodes (and, within their
    session timeout, their sessions) again.
    """

    def __init__(self, server: LocalZooKeeper) -> None:
        self.server = server

    def __repr__(self) -> str:
        return f"ZooKeeperHarness({self.server!r})"

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT``."""
        return self.server.hosts

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def data_dir(self) -> Path:
        return self.server.data_dir

    def is_running(self) -> bool:
        return self.server.is_running()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start it again after :meth:`stop`/:meth:`kill` (no-op if running)."""
        if not self.server.is_running():
            self.server.start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Clean shutdown (SIGTERM); clients go SUSPENDED and retry."""
        self.server.stop(timeout)

    def kill(self) -> None:
        """``kill -9`` the server: a crash, no shutdown at all."""
        self.server.kill()

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Stop then start, same port and data."""
        self.server.restart(timeout)

    def ensure_running(self) -> None:
        """Start the server if a test left it stopped."""
        self.start()

    def log_tail(self, lines: int = 60) -> str:
        return self.server.log_tail(lines)

    def new_chroot(self) -> str:
        """Create ``/t-<8 hex>`` and return ``"127.0.0.1:PORT/t-<8 hex>"``."""
        chroot = f"/t-{uuid.uuid4().hex[:8]}"
        client = KazooClient(hosts=self.hosts, timeout=CLIENT_TIMEOUT)
        try:
            client.start(timeout=CLIENT_TIMEOUT)
            client.create(chroot)
        finally:
            client.stop()
            client.close()
        return self.hosts + chroot


def start_session_zookeeper(base_dir: Path, tls: ServerTls | None = None) -> LocalZooKeeper:
    """Start a test ZooKeeper on a free port, retrying on another port if it is taken.

    Test settings: fsync off (a killed server still keeps everything, only a machine
    crash would lose data) and the default 500 ms tick, so sessions can be as short
    as 1 s.
    """
    last_error: ZooKeeperStartError | None = None
    for attempt in range(START_ATTEMPTS):
        if tls is not None:  # a fresh secure port on each attempt too
            tls = dataclasses.replace(tls, secure_port=free_port())
        server = LocalZooKeeper(base_dir / f"zk-{attempt}", free_port(), force_sync=False, tls=tls)
        try:
            server.start(START_TIMEOUT)
            return server
        except ZooKeeperStartError as exc:
            last_error = exc
            if "already in use" not in exc.summary and "Address already in use" not in exc.log_tail:
                raise
    assert last_error is not None
    raise last_error


@pytest.fixture(scope="session")
def zookeeper(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHarness]:
    """The session's one real ZooKeeper (see the module docstring)."""
    server = start_session_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    atexit.register(server.kill)  # if pytest dies before teardown, leave no JVM behind
    harness = ZooKeeperHarness(server)
    request.config.stash[_HARNESS] = harness
    request.config.stash[_SUMMARY] = (
        f"ZooKeeper: {server.hosts}, started in {server.last_start_seconds:.2f}s, log {server.log_path}"
    )
    register_log_source(
        request.config, "zookeeper", server, fixture="zookeeper", title=f"ZooKeeper log {server.log_path}"
    )
    try:
        yield harness
    finally:
        unregister_log_source(request.config, "zookeeper")
        del request.config.stash[_HARNESS]
        server.stop()
        atexit.unregister(server.kill)


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalZooKeeper, Pki]]:
    """A ZooKeeper of this test module with a TLS port besides its plaintext one (Netty,
    a PEM keystore from :func:`tests.support.pki.make_pki`), and the PKI: connect with
    ``server.secure_hosts`` and ``pki.ca``."""
    base = tmp_path_factory.mktemp("tls-zookeeper")
    pki = make_pki(base / "pki")
    server = start_session_zookeeper(base, ServerTls(1, pki.broker_cert, pki.broker_key, pki.ca))
    atexit.register(server.kill)
    try:
        yield server, pki
    finally:
        server.stop()
        atexit.unregister(server.kill)


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperHarness) -> str:
    """``"127.0.0.1:PORT/t-<8 hex>"``, a chroot of this test only, already created."""
    zookeeper.ensure_running()
    return zookeeper.new_chroot()


@pytest.fixture
def zk_client(zk_connect: str) -> Iterator[KazooClient]:
    """A started kazoo client inside this test's chroot; stopped and closed after it."""
    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=CLIENT_TIMEOUT)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(autouse=True)
def _zookeeper_up_between_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, start the session's ZooKeeper again if the test left it down.

    A failure test that stops ZooKeeper and then fails before starting it must not
    take every later test down with it. Costs nothing when no test used ZooKeeper.
    """
    yield
    harness = request.config.stash.get(_HARNESS, None)
    if harness is not None and not harness.is_running():
        harness.start()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line in the summary: where the session's ZooKeeper ran, its start time, its log."""
    summary = terminalreporter.config.stash.get(_SUMMARY, None)
    if summary is not None:
        terminalreporter.write_line(summary)


def expire_session(client: KazooClient, timeout: float = 15.0) -> None:
    """End ``client``'s ZooKeeper session on the server, as a long partition would.

    The server deletes the session's ephemeral nodes; the client sees ``LOST`` when it
    next talks to the server, and kazoo then opens a new session by itself. Returns
    once the client has seen ``LOST``; AssertionError if it did not within ``timeout``.

    How (the ZooKeeper FAQ's method): a second connection attaches to the same session
    with its id and password, which makes the server drop the client's connection, and
    then closes the session. If the client reconnects first and takes its session back,
    the twin's close is lost, so try again (a few times, bounded by ``timeout``).
    """
    client_id = client.client_id
    if client_id is None:
        raise RuntimeError("expire_session needs a connected client (client.client_id is None)")
    lost = threading.Event()

    def on_state(state: KazooState) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(on_state)
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    deadline = time.monotonic() + timeout
    try:
        for _ in range(5):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            twin = KazooClient(hosts=hosts, client_id=client_id, timeout=10.0)
            try:
                twin.start(timeout=min(remaining, CLIENT_TIMEOUT))
            finally:
                twin.stop()  # sends closeSession: the server expires the session now
                twin.close()
            if lost.wait(max(0.0, min(deadline - time.monotonic(), 5.0))):
                return
    finally:
        client.remove_listener(on_state)
    raise AssertionError(f"session 0x{client_id[0]:x} did not expire within {timeout}s")
