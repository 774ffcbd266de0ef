"""An authentication storm and a flood of silent TLS connections against one secured broker.

The attacker behaves as a password-guessing script would: from one address, many TLS
connections in parallel (a few threads, TLS sessions resumed when the broker allows it,
as a cheap attacker would), each running the SCRAM exchange with a made-up proof (no
PBKDF2 on the attacker's side: a guess costs it nothing) for a real user with a wrong
password or for a user that does not exist. Meanwhile an authenticated client produces
and consumes; its p99 (one produce answered plus the fetch that reads it back) and the
broker's peak RSS are printed (``pytest -s``) and asserted against generous bounds only:
the machine is shared. The broker's failure metric counts every failure and its log
stays a few rate-limited lines.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from broker.client import SaslCredentials
from broker.common.tls import TlsConfig
from broker.testing.localrun import free_port
from broker.wire import protocol, sasl
from tests.integration.test_abusive_clients import WellBehaved, open_fds
from tests.integration.test_authentication import (
    PASSWORD,
    broker_tls,
    create_user,
    secured_cluster,
)
from tests.support.memory import RssSampler, rss_bytes
from tests.support.metrics import samples, scrape, value
from tests.support.pki import Pki
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

MiB = 1 << 20
STORM = int(os.environ.get("LOGFERRY_AUTH_STORM", "10000"))
"""Failed authentications (set more to see that the broker's memory stays flat)."""
THREADS = 8
HANDSHAKE_S = 5.0
"""The silent connections' handshake timeout: long enough to tell a refusal from it."""


def _frame(sock: ssl.SSLSocket, decoder: protocol.FrameDecoder) -> protocol.Frame | None:
    """The next answer, or None when the broker closed the connection."""
    frame = decoder.next_frame()
    while frame is None:
        data = sock.recv(65536)
        if not data:
            return None
        decoder.feed(data)
        frame = decoder.next_frame()
    return frame


class Guesser:
    """Threads that fail SCRAM authentications as fast as they can, ``total`` in all."""

    def __init__(self, port: int, ca: Path, total: int, threads: int):
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca))
        self.total = total
        self.started = 0
        self.refused = 0
        self.resumed = 0
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True, name=f"guesser-{i}") for i in range(threads)
        ]

    def start(self) -> Guesser:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.1))
        assert not any(t.is_alive() for t in self._threads), "the guessers hung"

    def _take(self) -> int | None:
        with self._lock:
            if self.started >= self.total:
                return None
            self.started += 1
            return self.started

    def _run(self, index: int) -> None:
        session: ssl.SSLSession | None = None
        while (n := self._take()) is not None:
            user = "alice" if n % 2 else f"guess-{index}-{n}"  # a real user, or made-up ones
            try:
                with (
                    socket.create_connection(("127.0.0.1", self.port), timeout=30) as raw,
                    self.context.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as sock,
                ):
                    refused = self._guess(sock, user)
                    if sock.session_reused:
                        with self._lock:
                            self.resumed += 1
                    elif sock.session is not None:
                        session = sock.session
            except OSError as exc:
                refused = False
                with self._lock:
                    self.unexpected.append(repr(exc))
            if refused:
                with self._lock:
                    self.refused += 1

    @staticmethod
    def _guess(sock: ssl.SSLSocket, user: str) -> bool:
        """One SCRAM-SHA-256 exchange with a random proof; True if it was refused (code 30)."""
        decoder = protocol.FrameDecoder()
        nonce = base64.b64encode(os.urandom(18)).decode()
        sock.sendall(
            protocol.encode_request(protocol.SASL_HANDSHAKE, 1, sasl.encode_handshake_request("SCRAM-SHA-256"))
        )
        if _frame(sock, decoder) is None:
            return False
        first = f"n,,n={user},r={nonce}".encode()
        sock.sendall(protocol.encode_request(protocol.SASL_AUTHENTICATE, 2, sasl.encode_authenticate_request(first)))
        answer = _frame(sock, decoder)
        if answer is None:
            return False
        server_first = sasl.parse_authenticate_answer(answer.header).token.decode()
        server_nonce = dict(part.split("=", 1) for part in server_first.split(","))["r"]
        proof = base64.b64encode(os.urandom(32)).decode()
        final = f"c=biws,r={server_nonce},p={proof}".encode()
        sock.sendall(protocol.encode_request(protocol.SASL_AUTHENTICATE, 3, sasl.encode_authenticate_request(final)))
        answer = _frame(sock, decoder)
        return answer is not None and answer.header.get("err") == 30


@pytest.mark.slow
def test_an_authentication_storm_leaves_the_broker_serving(broker_cluster, pki: Pki, zk_connect: str, tmp_path: Path):
    create_user(zk_connect, tmp_path, "alice")
    metrics_port = free_port()
    cluster = secured_cluster(
        broker_cluster,
        pki,
        broker={"metrics_port": metrics_port},
        auth={"required": True, "mechanisms": ["SCRAM-SHA-256"]},
    )
    broker = cluster.brokers[0]
    pid = broker.proc.pid
    good = WellBehaved(
        cluster.bootstrap, tls=TlsConfig(ca_file=pki.ca), sasl=SaslCredentials("alice", PASSWORD, "SCRAM-SHA-256")
    ).start()
    time.sleep(1.0)
    since = len(good.latencies)
    baseline = rss_bytes(pid)
    log_before = len(broker.log_text().splitlines())
    sampler = RssSampler(pid)
    started = time.monotonic()
    guesser = Guesser(broker.port, pki.ca, STORM, THREADS).start()
    try:
        guesser.join(240)
        elapsed = time.monotonic() - started
        p99 = good.check(since, at_least=5)
        round_trips = len(good.latencies) - since
    finally:
        peak = sampler.stop()
        good.stop()
    log_lines = broker.log_text().splitlines()[log_before:]
    failed_lines = [line for line in log_lines if "authentication failed" in line]
    counted = value(
        samples(scrape(f"http://127.0.0.1:{metrics_port}/metrics")),
        "logferry_authentication_failures_total",
        mechanism="SCRAM-SHA-256",
    )
    settled = rss_bytes(pid)
    print(
        f"\n{STORM:,} failed authentications from {THREADS} threads in {elapsed:.1f}s "
        f"({STORM / elapsed:,.0f}/s, {guesser.resumed:,} TLS sessions resumed); broker RSS "
        f"{baseline / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB, {settled / MiB:.0f} MiB "
        f"after; authenticated client: "
        f"{round_trips} round trips, p99 {p99 * 1000:.0f} ms; {len(log_lines)} log lines "
        f"({len(failed_lines)} about failures); metric {counted:,.0f}"
    )
    assert not guesser.unexpected[:5], guesser.unexpected[:5]
    assert guesser.refused == STORM
    assert counted >= STORM
    assert p99 < 5.0
    assert peak - baseline < 100 * MiB
    assert len(failed_lines) <= elapsed / 10 + 2  # at most one line per 10 s
    assert len(log_lines) < 50 + elapsed, log_lines[:20]
    assert "Traceback" not in "\n".join(log_lines)


def test_a_thousand_silent_tls_connections_do_not_exhaust_descriptors(broker_cluster, pki: Pki):
    """1,000 connections that open a TLS port and never start the handshake: the broker
    refuses those over max_connections at once (a connection in its handshake counts),
    drops the rest after handshake_timeout_s and
    keeps serving a TLS client (test_abusive_clients covers the plaintext port)."""
    metrics_port = free_port()
    cluster = broker_cluster(
        1,
        broker={"max_connections": 300, "metrics_port": metrics_port},
        tls=broker_tls(pki, handshake_timeout_s=HANDSHAKE_S),
    )
    broker = cluster.brokers[0]
    pid = broker.proc.pid
    good = WellBehaved(cluster.bootstrap, tls=TlsConfig(ca_file=pki.ca)).start()
    time.sleep(0.5)
    since = len(good.latencies)
    baseline_fds = open_fds(pid)
    silent: list[socket.socket] = []
    try:
        for _ in range(1000):
            silent.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
        opened = time.monotonic()
        peak_fds = open_fds(pid)
        for sock in silent:
            sock.settimeout(0)

        def still_open(sock: socket.socket) -> bool:
            try:
                return sock.recv(1) != b""
            except BlockingIOError:
                return True
            except OSError:
                return False

        remaining = list(silent)

        def all_dropped() -> bool:
            nonlocal peak_fds
            peak_fds = max(peak_fds, open_fds(pid))
            remaining[:] = [s for s in remaining if still_open(s)]
            return not remaining

        def settled() -> bool:
            """Those over max_connections refused, well before the handshake timeout
            (polled: on a loaded machine the broker may take a moment to accept them)."""
            all_dropped()
            return 1000 - len(remaining) >= 650 and open_fds(pid) - baseline_fds <= 300 + 20

        wait_until(
            settled, timeout=HANDSHAKE_S - 1, what="the connections over max_connections refused (fds back under 320)"
        )
        settled_after = time.monotonic() - opened
        settled_fds = open_fds(pid)
        refused = 1000 - len(remaining)
        wait_until(all_dropped, timeout=30, what="silent TLS connections dropped")
        dropped_after = time.monotonic() - opened
        p99 = good.check(since, at_least=3)
    finally:
        for sock in silent:
            sock.close()
        good.stop()
    print(
        f"\n1,000 silent TLS connections: {refused} refused within {settled_after:.1f}s, all "
        f"dropped within {dropped_after:.1f}s (handshake timeout {HANDSHAKE_S:g}s); broker "
        f"fds {baseline_fds} before, {settled_fds} then (peak {peak_fds}: asyncio accepts a "
        f"burst before the refused are closed); TLS client p99 {p99 * 1000:.0f} ms"
    )
    assert dropped_after < HANDSHAKE_S + 10
    assert p99 < 5.0
    assert "Traceback" not in broker.log_text()
