"""A ZooKeeper ensemble on one machine, for development and the demo: ``logferry zk
start --ensemble 3``.

Why: a production ZooKeeper is three or five servers, and what a quorum does when a
member dies (a new leader elected, clients moving to another member, writes going on
while a majority lives) is worth seeing before a deployment. Each member is a
:class:`~broker.testing.zkserver.LocalZooKeeper` of its own, on its own loopback
address (``127.0.0.1``, ``127.0.0.2``, ...: Linux answers on the whole of 127/8), so
every member keeps ZooKeeper's usual ports (client, 2888 quorum, 3888 election) as on
hosts of their own, in one data dir::

    <data_dir>/member-1/   the first member's zoo.cfg, myid, log, pidfile and state
    <data_dir>/member-2/   ...

The tests' ensembles on separate hosts (network namespaces) are
:meth:`broker.testing.network.TestNetwork.zookeeper_ensemble`'s.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from broker.common.errors import ZooKeeperError
from broker.testing.zkserver import LocalZooKeeper

SIZES = (3, 5)
"""Ensemble sizes offered: odd, so that a majority survives the loss of one (or two)."""
DEFAULT_PREFIX = "127.0.0"
"""The members' addresses: ``<prefix>.1``, ``<prefix>.2``, ..."""
MEMBER_DIR = "member-{}"


def member_hosts(prefix: str, size: int) -> list[str]:
    """The members' loopback addresses; a prefix that is not three octets of 127/8 is a
    ZooKeeperError naming it."""
    try:
        first = ipaddress.ip_address(f"{prefix}.1")
    except ValueError:
        raise ZooKeeperError(f"ensemble prefix {prefix!r}: give the first three octets of a 127.x.y address") from None
    if not isinstance(first, ipaddress.IPv4Address) or not first.is_loopback or prefix.count(".") != 2:
        raise ZooKeeperError(f"ensemble prefix {prefix!r}: give the first three octets of a 127.x.y address")
    return [f"{prefix}.{i}" for i in range(1, size + 1)]


class LocalEnsemble:
    """``size`` ZooKeeper members on ``<prefix>.1`` .. ``<prefix>.<size>``, each on
    ``port``, in ``data_dir/member-<myid>``."""

    def __init__(self, data_dir: Path, port: int, size: int = 3, prefix: str = DEFAULT_PREFIX) -> None:
        if size not in SIZES:
            raise ZooKeeperError(f"an ensemble has {' or '.join(map(str, SIZES))} members, not {size}")
        self.data_dir = Path(data_dir).resolve()
        hosts = member_hosts(prefix, size)
        peers = [(myid, host) for myid, host in enumerate(hosts, start=1)]
        self.members = [
            LocalZooKeeper(self.data_dir / MEMBER_DIR.format(myid), port, host, peers=peers, myid=myid)
            for myid, host in peers
        ]

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalEnsemble | None:
        """Handles on the members an earlier ``start`` left in ``data_dir`` (for ``zk
        stop|status`` from another shell), or None when it holds no ensemble."""
        dirs = sorted(Path(data_dir).glob(MEMBER_DIR.format("*")), key=lambda d: d.name)
        found = [LocalZooKeeper.from_data_dir(d) for d in dirs if (d / "zoo.cfg").is_file()]
        if not found:
            return None
        ensemble = cls.__new__(cls)
        ensemble.data_dir = Path(data_dir).resolve()
        ensemble.members = found
        return ensemble

    @property
    def hosts(self) -> str:
        """The connect string: every member, so a client moves on when one is gone."""
        return ",".join(m.hosts for m in self.members)

    @property
    def majority(self) -> int:
        return len(self.members) // 2 + 1

    def start(self, timeout: float = 30.0, *, detach: bool = False) -> list[LocalZooKeeper]:
        """Start the members not running, then wait until each serves (a member serves
        only once a majority runs, so all are spawned first). Returns the members it
        started; on failure it stops them again and raises."""
        started = []
        try:
            for member in self.members:
                if not member.is_running():
                    member.start(timeout, detach=detach, wait=False)
                    started.append(member)
            for member in self.members:
                member.wait_ready(timeout)
        except BaseException:
            for member in started:
                member.kill()
            raise
        return started

    def stop(self, timeout: float = 10.0) -> list[int]:
        """Stop every running member; returns their pids."""
        stopped = []
        for member in self.members:
            pid = member.pid
            if pid is not None:
                member.stop(timeout)
                stopped.append(pid)
        return stopped

    def modes(self) -> list[str | None]:
        """Each member's mode (``leader``, ``follower``), None for one that does not serve."""
        result: list[str | None] = []
        for member in self.members:
            try:
                result.append(member.srvr().get("Mode"))
            except OSError:
                result.append(None)
        return result


__all__ = ["DEFAULT_PREFIX", "SIZES", "LocalEnsemble", "member_hosts"]
