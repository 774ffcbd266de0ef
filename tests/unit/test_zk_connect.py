"""The ZooKeeper connect string rule (broker.common.zk_connect): what passes, and that
every refusal names the bad part."""

from __future__ import annotations

import pytest

from broker.common.errors import ConfigError
from broker.common.zk_connect import ZkAddress, parse_zk_connect, validate_zk_connect


@pytest.mark.parametrize(
    "value, servers, chroot",
    [
        ("127.0.0.1:2181", [("127.0.0.1", 2181)], ""),
        ("127.0.0.1:2181/logferry/live", [("127.0.0.1", 2181)], "/logferry/live"),
        ("zk1:2181,zk2.example.com:2182,zk-3:1/x", [("zk1", 2181), ("zk2.example.com", 2182), ("zk-3", 1)], "/x"),
        ("[::1]:2181/t-1", [("::1", 2181)], "/t-1"),
        ("localhost:65535/a.b/c_d", [("localhost", 65535)], "/a.b/c_d"),
    ],
)
def test_valid_connect_strings_parse(value: str, servers: list, chroot: str) -> None:
    parsed = parse_zk_connect(value)
    assert parsed.servers == tuple(ZkAddress(h, p) for h, p in servers)
    assert parsed.chroot == chroot
    assert validate_zk_connect(value) == value


def test_hosts_is_what_kazoo_takes() -> None:
    assert parse_zk_connect("a:1,[::1]:2/c").hosts == "a:1,[::1]:2"


@pytest.mark.parametrize(
    "value, named",
    [
        ("", "is empty"),
        ("127.0.0.1", "'127.0.0.1' has no port"),
        ("a:2181,b/x", "'b' has no port"),
        ("a:2181,,b:2181", "empty host"),
        ("/logferry/live", "empty host"),
        (":2181", "':2181' has no host"),
        ("a:70000", "port 70000 of 'a:70000' is out of range 1-65535"),
        ("a:0", "port 0 of 'a:0' is out of range"),
        ("a:21x1", "port '21x1' of 'a:21x1' is not a number"),
        ("a:", "port '' of 'a:' is not a number"),
        ("a:2181/a//b", "chroot '/a//b' has an empty segment"),
        ("a:2181/a/", "chroot '/a/' ends with '/'"),
        ("a:2181/", "trailing '/'"),
        ("a:2181/a/../b", "'..' segment"),
        ("a:2181/zookeeper/x", "reserves"),
        ("a:2181 /x", "whitespace at position 6"),
        (" a:2181", "whitespace at position 0"),
        ("a:2181,\tb:2181", "whitespace"),
        ("a b:2181", "whitespace"),
        ("::1:2181", "IPv6 address in brackets"),
        ("[::1:2181", "no closing ']'"),
        ("[zz]:2181", "'zz' in '[zz]:2181' is not an IPv6 address"),
        ("[::1]/x", "has no port"),
        ("ho$t:2181", "'ho$t' is not a host name"),
        ("a:2181/x\x00y", "control character"),
    ],
)
def test_invalid_connect_strings_name_the_bad_part(value: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_zk_connect(value)
    message = str(info.value)
    assert named in message
    assert message.startswith(f"ZooKeeper connect string {value!r}: ")
    assert "host:port[,host:port...][/chroot]" in message


def test_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a string"):
        validate_zk_connect(2181)
