"""The ZooKeeper connect string rule (sans IO), written once.

A cluster is named by ``host:port[,host:port...][/chroot]``, e.g.
``zk1:2181,zk2:2181/logferry/live``. kazoo accepts far more (a missing port becomes
2181, ``/a//b`` is normalised, garbage fails later with a bare ``ValueError`` or
as a host that never answers), so a typo would surface as a slow connection failure
or, worse, as a different cluster. Everything that takes a connect string checks it
here first: the CLI's ``--zk``, the broker, agent, mirror and loader configs (through
:meth:`broker.common.config.Validator.zk_connect`), and
:func:`broker.coordination.zk.connect` itself. Each error names the bad part.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple

from broker.common.errors import ConfigError

EXAMPLE = "127.0.0.1:2181/logferry/live"
"""A well-formed connect string, for messages."""
FORMAT = "host:port[,host:port...][/chroot]"
"""The rule in words, for messages."""

_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?")
_SEGMENT = re.compile(r"[^\x00-\x1f\x7f/]+")


class ZkAddress(NamedTuple):
    """One ZooKeeper server: host name or IP address (IPv6 without brackets), port."""

    host: str
    port: int


class ZkConnect(NamedTuple):
    """A parsed connect string: the servers and the chroot ("" for none)."""

    servers: tuple[ZkAddress, ...]
    chroot: str

    @property
    def hosts(self) -> str:
        """The server list as kazoo takes it, without the chroot."""
        return ",".join(f"[{s.host}]:{s.port}" if ":" in s.host else f"{s.host}:{s.port}" for s in self.servers)


def _bad(value: str, problem: str) -> ConfigError:
    return ConfigError(f"ZooKeeper connect string {value!r}: {problem} (expected {FORMAT}, e.g. {EXAMPLE})")


def parse_zk_connect(value: object) -> ZkConnect:
    """Parse ``host:port[,host:port...][/chroot]``; raise ConfigError naming the bad part.

    Hosts are names or IP addresses (IPv6 in brackets: ``[::1]:2181``), every port is
    explicit and 1-65535, and the chroot, if any, is an absolute ZooKeeper path without
    empty, ``.`` or ``..`` segments and without a trailing ``/``. No whitespace anywhere.
    """
    if not isinstance(value, str):
        raise ConfigError(f"ZooKeeper connect string must be a string, got {value!r}")
    if not value:
        raise _bad(value, "is empty")
    space = re.search(r"\s", value)
    if space:
        raise _bad(value, f"contains whitespace at position {space.start()}")
    hosts, slash, chroot = value.partition("/")
    servers = tuple(_parse_server(value, part) for part in hosts.split(","))
    return ZkConnect(servers, _parse_chroot(value, slash + chroot) if slash else "")


def validate_zk_connect(value: object) -> str:
    """Return ``value`` if it is a well-formed connect string, else raise ConfigError."""
    parse_zk_connect(value)
    assert isinstance(value, str)
    return value


def _parse_server(value: str, part: str) -> ZkAddress:
    if not part:
        raise _bad(value, "has an empty host (a stray ',' or nothing before the chroot)")
    if part.startswith("["):
        host, bracket, rest = part[1:].partition("]")
        if not bracket:
            raise _bad(value, f"{part!r} has no closing ']'")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _bad(value, f"{host!r} in {part!r} is not an IPv6 address") from None
        if not rest.startswith(":"):
            raise _bad(value, f"{part!r} has no port (write [{host}]:2181)")
        port_text = rest[1:]
    else:
        host, colon, port_text = part.rpartition(":")
        if not colon:
            raise _bad(value, f"{part!r} has no port (write {part}:2181)")
        if not host:
            raise _bad(value, f"{part!r} has no host")
        if ":" in host:
            raise _bad(value, f"{part!r}: write an IPv6 address in brackets, [{host}]:{port_text}")
        if not _HOSTNAME.fullmatch(host):
            raise _bad(value, f"{host!r} is not a host name or address")
    if not port_text.isdigit() or not port_text.isascii():
        raise _bad(value, f"port {port_text!r} of {part!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise _bad(value, f"port {port} of {part!r} is out of range 1-65535")
    return ZkAddress(host, port)


def _parse_chroot(value: str, chroot: str) -> str:
    if chroot == "/":
        raise _bad(value, "has a trailing '/' and no chroot (drop the '/', or name the cluster's chroot)")
    if chroot.endswith("/"):
        raise _bad(value, f"chroot {chroot!r} ends with '/'")
    for segment in chroot[1:].split("/"):
        if not segment:
            raise _bad(value, f"chroot {chroot!r} has an empty segment ('//')")
        if segment in (".", ".."):
            raise _bad(value, f"chroot {chroot!r} has a {segment!r} segment")
        if not _SEGMENT.fullmatch(segment):
            raise _bad(value, f"chroot {chroot!r} has a control character")
    if chroot.split("/")[1] == "zookeeper":
        raise _bad(value, f"chroot {chroot!r} is under /zookeeper, which ZooKeeper reserves")
    return chroot


__all__ = ["EXAMPLE", "FORMAT", "ZkAddress", "ZkConnect", "parse_zk_connect", "validate_zk_connect"]
