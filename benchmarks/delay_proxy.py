"""A userspace WAN for benchmarks: TCP proxies on 127.0.0.1 that delay each direction.

``tc netem`` needs privileges this machine does not give, so the delay is added in
userspace: every chunk read from one side is written to the other ``--delay-ms``
later, in order, on each direction separately (a round trip costs twice the delay).
Bandwidth is not limited; the proxy only adds latency, as a long fat pipe does.

Run it as its own process so it never competes with the measured one for a GIL:

    python benchmarks/delay_proxy.py --delay-ms 25 --route 0:127.0.0.1:9092 ...

Each ``--route LISTEN:HOST:PORT`` listens on ``127.0.0.1:LISTEN`` (0: a free port) and
forwards to ``HOST:PORT``. Once every listener is up it prints one line
``ready LISTEN_PORT ...`` (the actual ports, in ``--route`` order) and serves until
stdin closes or it is terminated. :class:`DelayProxy` starts and stops such a process.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
from pathlib import Path

CHUNK = 1024 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while True:
            data = await reader.read(CHUNK)
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    reading = asyncio.ensure_future(read())
    try:
        await write()
    finally:
        reading.cancel()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _serve(routes: list[tuple[int, str, int]], delay: float) -> None:
    async def handler(host: str, port: int, c_reader: asyncio.StreamReader,
                      c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(host, port, limit=CHUNK)
        except OSError:
            c_writer.close()
            return
        _nodelay(c_writer)
        _nodelay(s_writer)
        try:
            await asyncio.gather(_pipe(c_reader, s_writer, delay), _pipe(s_reader, c_writer, delay))
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass  # a side went away, or the proxy is stopping
        finally:
            for w in (c_writer, s_writer):
                w.close()

    servers = []
    for listen, host, port in routes:
        server = await asyncio.start_server(
            lambda r, w, h=host, p=port: handler(h, p, r, w), "127.0.0.1", listen, limit=CHUNK)
        servers.append(server)
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print("ready", *ports, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin


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
        asyncio.run(_serve(routes, args.delay_ms / 1000))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
