"""A userspace WAN for benchmarks: TCP proxies on 127.0.0.1 that delay each direction.

``tc netem`` needs privileges this machine does not give, so the delay is added in
userspace: every chunk read from one side is written to the other ``--delay-ms``
later, in order, on each direction separately (a round trip costs twice the delay).
Bandwidth is not limited; the proxy only adds latency, as a long fat pipe does.

It is built to cost little CPU, since it shares the cores with what it measures: a
thread pair per direction (a reader splicing what arrives into a ring of kernel pipes
and stamping each run with its due time, a writer splicing each run out when due; a
ring buffer and ``recv_into`` where ``splice(2)`` is missing), blocking calls that
release the GIL, and with no delay a plain ``splice(2)``: bytes never enter Python.

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
import mmap
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
RING = 32 * 1024 * 1024
"""Bytes one delayed direction holds at most (read, not yet due): 1.3 GB/s at 25 ms."""
MIN_READ = 256 * 1024
"""A read waits for this much free room in the ring (not for a sliver at its end)."""
SPLICE_CHUNK = 1024 * 1024
"""Bytes moved per splice(2) call (a pipe holds 1 MiB at most by default)."""


def _pipe(src: socket.socket, dst: socket.socket, delay: float) -> None:
    """Copy ``src`` to ``dst``, each chunk ``delay`` seconds after it was read (one direction).

    Without delay the bytes go socket -> pipe -> socket in the kernel (splice(2), no
    copy through Python) where the platform has it, else by large reads. With delay see
    :func:`_delayed`.
    """
    try:
        if delay <= 0:
            if hasattr(os, "splice"):
                _splice(src, dst)
            else:
                while data := src.recv(CHUNK):
                    dst.sendall(data)
            return
        if hasattr(os, "splice"):
            _delayed_splice(src, dst, delay)
        else:
            _delayed(src, dst, delay)
    except OSError:
        pass  # a side went away
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _delayed(src: socket.socket, dst: socket.socket, delay: float) -> None:
    """Copy ``src`` to ``dst`` with every byte sent ``delay`` seconds after it was read.

    Bytes are read (``recv_into``) into a ring buffer of ``RING`` bytes, lazily backed
    (mmap), and sent from it: no fresh buffer per read (a 4 MiB ``recv`` costs an
    mmap, page faults and zeroing before its copy), no copy but the kernel's. A reader
    thread stamps each read with its due time and queues (due, start, length); this
    thread sends each run when it is due, in order, and frees its room. The reader
    waits only while the ring is full (more than ``RING`` bytes in flight: 1.3 GB/s at
    25 ms).
    """
    ring = mmap.mmap(-1, RING)
    view = memoryview(ring)
    queue: collections.deque[tuple[float, int, int]] = collections.deque()
    """Runs read and not yet sent, oldest first: (due, start, length); length 0: the end."""
    ready = threading.Condition()

    def room(at: int) -> tuple[int, int]:
        """(where to read next, bytes free there) given the next write position ``at``."""
        if not queue:
            return 0, RING
        oldest = queue[0][1]
        if at > oldest:  # not wrapped: up to the end, or wrap to the front
            return (at, RING - at) if RING - at >= MIN_READ else (0, oldest)
        return at, oldest - at

    def read() -> None:
        at = 0
        while True:
            with ready:
                while True:
                    at, free = room(at)
                    if free >= MIN_READ:
                        break
                    ready.wait()
            try:
                n = src.recv_into(view[at : at + min(free, CHUNK)])
            except OSError:
                n = 0
            with ready:
                queue.append((time.monotonic() + delay, at, n))
                ready.notify_all()
            if not n:
                return
            at += n

    threading.Thread(target=read, daemon=True).start()
    while True:
        with ready:
            while not queue:
                ready.wait()
            due, start, n = queue[0]
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if not n:
            return
        dst.sendall(view[start : start + n])
        with ready:
            queue.popleft()
            ready.notify_all()


def _delayed_splice(src: socket.socket, dst: socket.socket, delay: float) -> None:
    """:func:`_delayed` with the bytes held in kernel pipes instead of a ring buffer.

    A pipe holds 1 MiB at most here, so the bytes in flight are spread over a ring of
    ``RING // SPLICE_CHUNK`` pipes: the reader thread splices from ``src`` into the
    current pipe (waiting for ``src`` with poll, non-blocking splices, so a full pipe
    answers at once and the next empty one takes over) and queues (due, pipe, length);
    this thread splices each run from its pipe to ``dst`` when it is due. The bytes
    never enter Python and are never copied to user space.
    """
    pipes: list[tuple[int, int]] = []
    reader: threading.Thread | None = None
    closed = False
    try:
        for _ in range(RING // SPLICE_CHUNK):
            r, w = os.pipe()
            pipes.append((r, w))
            with contextlib.suppress(OSError):
                fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, SPLICE_CHUNK)
        held = [0] * len(pipes)
        """Bytes queued in each pipe and not yet sent."""
        queue: collections.deque[tuple[float, int, int]] = collections.deque()
        """(due, pipe index, length) read and not yet sent, oldest first; length 0: the end."""
        ready = threading.Condition()
        s_fd, d_fd = src.fileno(), dst.fileno()
        nonblock = getattr(os, "SPLICE_F_NONBLOCK", 2)

        def read() -> None:
            current = 0
            poller = select.poll()
            poller.register(s_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            while True:
                n = 0
                try:
                    poller.poll()
                    while True:
                        try:
                            n = os.splice(s_fd, pipes[current][1], SPLICE_CHUNK, flags=nonblock)
                            break
                        except BlockingIOError:
                            # this pipe is full (or src had nothing after all): the next
                            # pipe takes over once the writer emptied it
                            with ready:
                                nxt = (current + 1) % len(pipes)
                                if held[current]:  # (else src itself had nothing yet)
                                    while held[nxt] and not closed:
                                        ready.wait()
                                    if closed:
                                        return
                                    current = nxt
                            poller.poll()
                except OSError:
                    n = 0
                with ready:
                    held[current] += n
                    queue.append((time.monotonic() + delay, current, n))
                    ready.notify_all()
                if not n:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while True:
            with ready:
                while not queue:
                    ready.wait()
                due, index, n = queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not n:
                return
            left = n
            while left:
                moved = os.splice(pipes[index][0], d_fd, left)
                if not moved:
                    raise OSError("a delay pipe ran dry")  # cannot happen: its bytes are queued
                left -= moved
            with ready:
                queue.popleft()
                held[index] -= n
                ready.notify_all()
    finally:
        if reader is not None:  # stop the reader (src's end wakes its poll) before the
            with ready:  # pipes it splices into are closed
                closed = True
                ready.notify_all()
            with contextlib.suppress(OSError):
                src.shutdown(socket.SHUT_RD)
            reader.join(5)
        for fds in pipes:
            for fd in fds:
                os.close(fd)


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
    directions = [
        threading.Thread(target=_pipe, args=(a, b, delay), daemon=True) for a, b in ((client, server), (server, client))
    ]
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
            threading.Thread(target=_connection, args=(client, host, port, delay), daemon=True).start()


class DelayProxy:
    """Runs ``delay_proxy.py`` in a subprocess; ``ports`` maps each target to its proxy port."""

    def __init__(self, targets: list[tuple[str, int]], delay_ms: float):
        self.targets = targets
        self.delay_ms = delay_ms
        self.ports: dict[tuple[str, int], int] = {}
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> DelayProxy:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--delay-ms", str(self.delay_ms)]
        for host, port in self.targets:
            cmd += ["--route", f"0:{host}:{port}"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if not line or line[0] != "ready":
            self.__exit__()
            raise RuntimeError(f"delay proxy did not start: {line}")
        self.ports = {t: int(p) for t, p in zip(self.targets, line[1:], strict=True)}
        return self

    @property
    def pid(self) -> int:
        """The proxy process's id (its CPU time is what the proxy costs)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

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
    with contextlib.suppress(KeyboardInterrupt):
        _serve(routes, args.delay_ms / 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
