"""A test network: hosts as network namespaces on switches, links cut and healed.

Every test so far ran its processes on one loopback address; a partition needs hosts.
:class:`Network` builds them with the kernel's own parts (``ip netns``, ``ip link``,
``ip route``; run as root):

* a **switch** is a Linux bridge, alone in a namespace of its own;
* a **host** is a namespace with ``lo`` and one ``eth0``, a veth pair whose other end is a
  port of its switch, and the address ``10.77.<switch>.<n>/24``; 10.77 exists only inside
  these namespaces, so a process reaches a host's address only over its switch;
* a **router** is a host with a leg on several switches (``10.77.<switch>.254``, IP
  forwarding on): two "datacenters" on two switches, and the WAN between them;
* a **cut** sets a host's port on its switch down (the cable pulled at the switch: both
  directions, silently; TCP peers see retransmissions, then timeouts), a **block** adds a
  blackhole route on one host toward another (one way: that host's own sends fail with
  EINVAL, the other's packets still arrive but get no answer). :meth:`Network.heal` undoes
  every cut and block.

Nothing lives in the root namespace, not even a veth end: the names of bridges and ports
(``br0``, a host's name) only need to be unique inside their switch, and deleting the
namespaces removes every interface with them. Addresses need not be unique either: each
network's hosts and switch live in namespaces of their own, so two tests' ``10.77.1.2``
are two addresses that never meet (several networks are built and cut at once on
different pytest workers; ``tests/integration/test_network.py`` proves they stay apart).
Namespace names carry the creating process's pid and start time
(``lf<pid>t<start>n<k>-<host>``, ``lf<pid>t<start>n<k>-s-<switch>``): unique per pytest
worker and per run, even when a later process is given a dead one's pid, and
:func:`remove_leftovers` finds those of a run that died without tearing down (no process
with that pid and start time) and removes them, processes inside included. It need not
wait for a later run: the first network of a process starts a guard (:func:`guard`), a
shell in a session of its own that waits for that process to end, however it ends (kill
-9 included: a pytest worker that xdist kills on Ctrl-C, or CI's timeout), and then
deletes the namespaces it left, killing what still runs in them.

Processes start inside a host with :meth:`Host.inside` (the calling thread enters the
namespace, :mod:`broker.testing.netns`; what it starts, forks or execs, and the fork
server's children too, lands there) or with ``ip netns exec`` (:meth:`Host.argv`).
Nothing here is used by a deployed process.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import re
import signal
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from broker.testing import netns

SUBNET = "10.77"
"""The first two octets of every address here: switch ``s`` is ``10.77.s.0/24``."""
ROUTER_OCTET = 254
"""A router's last octet on each switch it joins."""
NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
"""A host's or switch's name: short, as it names a bridge port (15 characters at most)."""
OWNED = re.compile(r"lf(\d+)(?:t(\d+))?n\d+-")
"""The start of every namespace name here: the pid of the process that made it and its
start time (in clock ticks after boot; names without one come from older checkouts,
still run beside this one by other worktrees: they are judged by their pid alone)."""
IP_TIMEOUT = 10.0
LOCK_FILE = "/run/lock/logferry-netns.lock"
"""Held around ``ip netns add``: the first one after boot makes ``/run/netns`` a shared
mount, and two at once (pytest workers building their first networks together, as the
nemeses do at the start of ``make test``) may both mount it, the second mount hiding the
first one's namespaces."""
_counter = itertools.count()
_guard: subprocess.Popen[bytes] | None = None

GUARD_SCRIPT = """
cat >/dev/null  # until the pipe's other end closes: the process that made the networks is gone
for ns in $(ip netns list | awk '{print $1}' | grep "^$1"); do
    for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null; done
    ip netns delete "$ns" 2>/dev/null
done
"""
"""The guard's shell script (see :func:`guard`); ``$1`` is the owner's prefix."""


class NetworkError(RuntimeError):
    """An ``ip`` command failed, or a name or address is not usable."""


def ip(*args: str) -> str:
    """Run ``ip args`` and return its output; :class:`NetworkError` names the command."""
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"ip {' '.join(args)}: {exc}") from exc
    if done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def namespaces() -> list[str]:
    """Every named network namespace (``ip netns list``)."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def pids_in(namespace: str) -> list[int]:
    """The processes whose network namespace is ``namespace``."""
    try:
        return [int(p) for p in ip("netns", "pids", namespace).split()]
    except NetworkError:
        return []


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_prefix(pid: int | None = None) -> str:
    """The start of the names of every namespace process ``pid`` (this one) makes."""
    pid = os.getpid() if pid is None else pid
    return f"lf{pid}t{start_time(pid)}n"


def _owner_alive(pid: int, started: str | None) -> bool:
    """Whether the process that named a namespace still runs (the same pid and, when the
    name says it, the same start time: a pid is reused once its process is gone)."""
    now = start_time(pid)
    return now is not None and (started is None or int(started) == now)


def _delete(namespace: str) -> None:
    """Kill what still runs in ``namespace`` (its owner should have stopped it), delete it."""
    for pid in pids_in(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(NetworkError):
        ip("netns", "delete", namespace)


def remove_leftovers() -> list[str]:
    """Delete the namespaces of runs that died before tearing down (their creating
    process is gone), killing what still runs in them; returns their names. Namespaces
    of live processes (another worker, another run) are left alone."""
    removed = []
    for name in namespaces():
        owner = OWNED.match(name)
        if owner and not _owner_alive(int(owner.group(1)), owner.group(2)):
            _delete(name)
            removed.append(name)
    return removed


def guard() -> None:
    """Start this process's guard, once: ``sh`` in a session of its own (the terminal's
    Ctrl-C and a signal to this process group miss it) reading a pipe that only this
    process holds (non-inheritable: nothing it execs keeps it open). When this process
    ends, however it ends, the pipe reaches its end and the guard deletes every
    namespace named with :func:`owner_prefix`, killing what runs in them. After a
    clean teardown it finds none."""
    global _guard
    if _guard is not None and _guard.poll() is None:
        return
    _guard = subprocess.Popen(
        ["sh", "-c", GUARD_SCRIPT, "logferry-netns-guard", owner_prefix()],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@dataclass
class Switch:
    """A bridge (``br0``) alone in namespace :attr:`netns`; subnet ``10.77.<index>.0/24``."""

    name: str
    netns: str
    index: int
    router: str | None = None
    """The address of the router on this switch, hosts' default gateway (None: none yet)."""
    hosts: int = 0
    """Hosts attached so far (the next gets the next address)."""

    def address(self, octet: int) -> str:
        return f"{SUBNET}.{self.index}.{octet}"


@dataclass
class Host:
    """A network namespace with one address per switch it is attached to."""

    name: str
    netns: str
    legs: dict[str, str] = field(default_factory=dict)
    """Switch name -> this host's address on it."""

    @property
    def address(self) -> str:
        """The host's (first) address."""
        return next(iter(self.legs.values()))

    def inside(self) -> contextlib.AbstractContextManager[None]:
        """Run a block with the calling thread in this host (:func:`broker.testing.netns.inside`)."""
        return netns.inside(self.netns)

    def argv(self, command: Iterable[str]) -> list[str]:
        """``command`` run on this host through ``ip netns exec``."""
        return ["ip", "netns", "exec", self.netns, *command]

    def pids(self) -> list[int]:
        """The processes running on this host."""
        return pids_in(self.netns)


class Network:
    """Switches, hosts and routers of one test, torn down by :meth:`close` (see the module)."""

    def __init__(self) -> None:
        self.prefix = f"{owner_prefix()}{next(_counter)}-"
        guard()
        self.switches: dict[str, Switch] = {}
        self.hosts: dict[str, Host] = {}
        self._blocks: set[tuple[str, str]] = set()
        self._cut: set[tuple[str, str]] = set()
        atexit.register(self.close)

    # -- building ------------------------------------------------------------------------

    def switch(self, name: str) -> Switch:
        """A new switch (a bridge in a namespace of its own)."""
        self._check_name(name, self.switches)
        sw = Switch(name, f"{self.prefix}s-{name}", len(self.switches) + 1)
        self._new_namespace(sw.netns)
        self.switches[name] = sw
        ip("-n", sw.netns, "link", "add", "name", "br0", "type", "bridge")
        ip("-n", sw.netns, "link", "set", "dev", "br0", "up")
        return sw

    def host(self, name: str, switch: str) -> Host:
        """A new host on ``switch``, with the switch's next address."""
        self._check_name(name, self.hosts)
        host = Host(name, f"{self.prefix}{name}")
        self._new_namespace(host.netns)
        self.hosts[name] = host
        self._attach(host, self._switch(switch), "eth0")
        return host

    def router(self, name: str, *switches: str) -> Host:
        """A new router joining ``switches`` (``10.77.<s>.254`` on each, forwarding on);
        every host on them, now and later, routes the other switches' subnets through it."""
        if len(switches) < 2:
            raise NetworkError(f"router {name!r} needs two switches at least, got {list(switches)}")
        self._check_name(name, self.hosts)
        host = Host(name, f"{self.prefix}{name}")
        self._new_namespace(host.netns)
        self.hosts[name] = host
        for sw_name in switches:
            sw = self._switch(sw_name)
            if sw.router is not None:
                raise NetworkError(f"switch {sw_name!r} has a router already")
            self._attach(host, sw, f"to-{sw_name}"[:15], octet=ROUTER_OCTET)
            sw.router = sw.address(ROUTER_OCTET)
        ip("netns", "exec", host.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for other in self.hosts.values():
            if other is not host:
                self._route_via_routers(other)
        return host

    # -- faults ----------------------------------------------------------------------------

    def cut(self, host: str, switch: str | None = None) -> None:
        """Pull ``host``'s cable at ``switch`` (its only or first one): no packet either way."""
        sw = self._leg(host, switch)
        ip("-n", sw.netns, "link", "set", "dev", host, "down")
        self._cut.add((host, sw.name))

    def block(self, source: str, destination: str) -> None:
        """One way: ``source`` drops what it sends to ``destination`` (a blackhole route
        per address of ``destination``; ``source``'s own sends there fail with EINVAL)."""
        src, dst = self._host(source), self._host(destination)
        for address in dst.legs.values():
            ip("-n", src.netns, "route", "add", "blackhole", f"{address}/32")
        self._blocks.add((source, destination))

    def partition(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Both ways between every host of ``side`` and every host of ``other``."""
        others = list(other)
        for a in side:
            for b in others:
                self.block(a, b)
                self.block(b, a)

    def heal(self) -> None:
        """Undo every :meth:`cut` and :meth:`block`."""
        for host, sw_name in sorted(self._cut):
            ip("-n", self.switches[sw_name].netns, "link", "set", "dev", host, "up")
        self._cut.clear()
        for source, destination in sorted(self._blocks):
            src, dst = self.hosts[source], self.hosts[destination]
            for address in dst.legs.values():
                ip("-n", src.netns, "route", "del", "blackhole", f"{address}/32")
        self._blocks.clear()

    # -- teardown ------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """This network's namespaces that exist now."""
        return [n for n in namespaces() if n.startswith(self.prefix)]

    def close(self) -> None:
        """Delete every namespace of this network (hosts first, then switches), killing
        any process still running in one. Idempotent; also run at exit."""
        atexit.unregister(self.close)
        mine = set(self.namespaces())
        for name in sorted(mine, key=lambda n: n.startswith(f"{self.prefix}s-")):
            _delete(name)
        self.hosts.clear()
        self.switches.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------

    def _check_name(self, name: str, taken: Iterable[str]) -> None:
        if not NAME.fullmatch(name):
            raise NetworkError(f"network name {name!r} is not 1-12 lowercase letters and digits starting with a letter")
        if name in taken:
            raise NetworkError(f"{name!r} exists in this network already")

    def _new_namespace(self, name: str) -> None:
        with _netns_lock():
            ip("netns", "add", name)
        ip("-n", name, "link", "set", "dev", "lo", "up")

    def _switch(self, name: str) -> Switch:
        try:
            return self.switches[name]
        except KeyError:
            raise NetworkError(f"no switch {name!r} in this network (switches: {sorted(self.switches)})") from None

    def _host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise NetworkError(f"no host {name!r} in this network (hosts: {sorted(self.hosts)})") from None

    def _leg(self, host: str, switch: str | None) -> Switch:
        legs = self._host(host).legs
        if switch is None:
            switch = next(iter(legs))
        if switch not in legs:
            raise NetworkError(f"host {host!r} is not on switch {switch!r} (it is on {sorted(legs)})")
        return self.switches[switch]

    def _attach(self, host: Host, sw: Switch, device: str, octet: int | None = None) -> None:
        """A veth pair: port ``host.name`` on ``sw``'s bridge, ``device`` in ``host``."""
        if octet is None:
            sw.hosts += 1
            octet = sw.hosts
        address = sw.address(octet)
        peer = ("peer", "name", device, "netns", host.netns)
        ip("-n", sw.netns, "link", "add", "name", host.name, "type", "veth", *peer)
        ip("-n", sw.netns, "link", "set", "dev", host.name, "master", "br0", "up")
        ip("-n", host.netns, "addr", "add", f"{address}/24", "dev", device)
        ip("-n", host.netns, "link", "set", "dev", device, "up")
        host.legs[sw.name] = address
        if sw.router is not None:
            self._route_via_routers(host)

    def _route_via_routers(self, host: Host) -> None:
        """Routes from ``host`` to every subnet it is not on, through a router of its switch."""
        for sw_name in host.legs:
            gateway = self.switches[sw_name].router
            if gateway is None or gateway in host.legs.values():
                continue
            for other in self.switches.values():
                if other.name in host.legs:
                    continue
                ip("-n", host.netns, "route", "replace", f"{SUBNET}.{other.index}.0/24", "via", gateway)


@contextlib.contextmanager
def _netns_lock() -> Iterator[None]:
    """:data:`LOCK_FILE`, held (an advisory lock between processes, gone with them)."""
    os.makedirs(os.path.dirname(LOCK_FILE), exist_ok=True)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def network() -> Iterator[Network]:
    """A :class:`Network`, closed at the end of the block."""
    net = Network()
    try:
        yield net
    finally:
        net.close()


__all__ = [
    "Host",
    "Network",
    "NetworkError",
    "Switch",
    "guard",
    "namespaces",
    "network",
    "owner_prefix",
    "pids_in",
    "remove_leftovers",
    "start_time",
]
