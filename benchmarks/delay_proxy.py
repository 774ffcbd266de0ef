"""A userspace WAN for benchmarks: TCP proxies on 127.0.0.1 that delay each direction.

``tc netem`` needs privileges this machine does not give, so the delay is added in
userspace: every chunk read from one side is written to the other ``--delay-ms``
later, in order, on each direction separately (a round trip costs twice the delay).
Bandwidth is not limited; the proxy only adds latency, as a long fat pipe does.

It is built to cost little CPU, since it shares the cores with what it measures: a
thread pair per direction (a reader timestamping reads of up to 4 MiB into a queue, a
writer sending each when due), blocking calls that release the GIL, and with no delay
``splice(2)`` (bytes never enter Python).

Run it as its own process so it never competes with the measured one for a GIL:

    python benchmarks/delay_proxy.py --delay-ms 25 --route 0:127.0.0.1:9092 ...

Each ``--route LISTEN:HOST:PORT`` listens on ``127.0.0.1:LISTEN`` (0: a free port) and
forwards to ``HOST:PORT``. Once every listener is up it prints one line
``ready LISTEN_PORT ...`` (the actual ports, in ``--route`` order) and serves until
stdin closes or it is terminated. :class:`DelayProxy` starts and stops such a process.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

CHUNK = 4 * 1024 * 1024
"""Largest read: few Python steps per megabyte, so the proxy costs little CPU."""
SPLICE_CHUNK = 1024 * 1024
"""Bytes moved per splice(2) call (a pipe holds 1 MiB at most by default)."""


def _pipe(src: socket.socket, dst: socket.socket, delay: float) -> None:
    """Copy ``src`` to ``dst``, each chunk ``delay`` seconds after it was read (one direction).

    Without delay the bytes go socket -> pipe -> socket in the kernel (splice(2), no
    copy through Python) where the platform has it, else by large reads. With delay a
    reader thread timestamps chunks into a queue and this thread writes each one when
    it is due, in order.
    """
    try:
        if delay <= 0:
            if hasattr(os, "splice"):
                _splice(src, dst)
            else:
                while data := src.recv(CHUNK):
                    dst.sendall(data)
            return
        queue: collections.deque[tuple[float, bytes]] = collections.deque()
        ready = threading.Condition()

        def read() -> None:
            while True:
                try:
                    data = src.recv(CHUNK)
                except OSError:
                    data = b""
                with ready:
                    queue.append((time.monotonic() + delay, data))
                    ready.notify()
                if not data:
                    return

        threading.Thread(target=read, daemon=True).start()
        while True:
            with ready:
                while not queue:
                    ready.wait()
                due, data = queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                return
            dst.sendall(data)
    except OSError:
        pass  # a side went away
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _splice(src: socket.socket, dst: socket.socket) -> None:
    """Move bytes from ``src`` to ``dst`` through a kernel pipe until ``src`` ends."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # 1 MiB, not 64 KiB, per pass
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, SPLICE_CHUNK)
    try:
        s_fd, d_fd = src.fileno(), dst.fileno()
        while True:
            n = os.splice(s_fd, w, SPLICE_CHUNK)
            if not n:
                return
            while n:
                n -= os.splice(r, d_fd, n)
    finally:
        os.close(r)
        os.close(w)


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _connection(client: socket.socket, host: str, port: int, delay: float) -> None:
    try:
        server = socket.create_connection((host, port))
    except OSError:
        client.close()
        return
    for sock in (client, server):
        _nodelay(sock)
    directions = [threading.Thread(target=_pipe, args=(a, b, delay), daemon=True)
                  for a, b in ((client, server), (server, client))]
    for thread in directions:
        thread.start()
    for thread in directions:
        thread.join()
    client.close()
    server.close()


def _serve(routes: list[tuple[int, str, int]], delay: float) -> None:
    listeners = []
    for listen, host, port in routes:
        sock = socket.create_server(("127.0.0.1", listen))
        listeners.append((sock, host, port))
    print("ready", *(s.getsockname()[1] for s, _, _ in listeners), flush=True)
    by_fd = {s.fileno(): (s, h, p) for s, h, p in listeners}
    stdin = sys.stdin.fileno()
    while True:  # until the parent closes our stdin
        readable, _, _ = select.select([stdin, *by_fd], [], [])
        for fd in readable:
            if fd == stdin:
                if not os.read(stdin, 4096):
                    return
                continue
            sock, host, port = by_fd[fd]
            client, _ = sock.accept()
            threading.Thread(target=_connection, args=(client, host, port, delay),
                             daemon=True).start()


class DelayProxy:
    """Runs ``delay_proxy.py`` in a subprocess; ``ports`` maps each target to its proxy port."""

    def __init__(self, targets: list[tuple[str, int]], delay_ms: float):
        self.targets = targets
        self.delay_ms = delay_ms
        self.ports: dict[tuple[str, int], int] = {}
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> "DelayProxy":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--delay-ms", str(self.delay_ms)]
        for host, port in self.targets:
            cmd += ["--route", f"0:{host}:{port}"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if not line or line[0] != "ready":
            self.__exit__()
            raise RuntimeError(f"delay proxy did not start: {line}")
        self.ports = {t: int(p) for t, p in zip(self.targets, line[1:])}
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
            self._proc = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, required=True, help="added per direction")
    parser.add_argument("--route", action="append", required=True, metavar="LISTEN:HOST:PORT")
    args = parser.parse_args()
    routes = []
    for route in args.route:
        listen, host, port = route.split(":")
        routes.append((int(listen), host, int(port)))
    try:
        _serve(routes, args.delay_ms / 1000)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
