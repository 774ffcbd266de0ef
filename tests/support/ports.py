"""Free TCP ports on 127.0.0.1 for the servers tests start (ZooKeeper, brokers)."""

from __future__ import annotations

import socket

_MAX_TRIES = 100
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, never the same one twice per process.

    The kernel picks an unused ephemeral port when binding to port 0. The port is
    released before the caller binds it, so another program could take it in between;
    servers started by the tests fail fast on a taken port, and the ZooKeeper fixture
    retries with another one. Remembering what was handed out stops two servers of one
    test session (asked for ports before either binds) from getting the same port.
    """
    for _ in range(_MAX_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no new free port on {host} after {_MAX_TRIES} tries")
