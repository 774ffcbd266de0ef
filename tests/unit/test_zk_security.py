"""ZooKeeper security, sans IO: the ``[zookeeper]`` section and ``--zk-*`` options,
the connect string that carries them, the ACL each znode gets, and the TLS lines of a
test server's zoo.cfg."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import pytest
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from broker.cli.zk_args import add_zk_args, zk_security_from_args, zk_target
from broker.common.config import Validator
from broker.common.errors import ConfigError, ZooKeeperError
from broker.common.zk_security import (
    ZkSecurity,
    ZkTarget,
    digest_id,
    security_of,
    with_security,
    zookeeper_from_table,
)
from broker.coordination.zk_acl import WORLD_READ, AclPolicy, acls_for, digest_acl, is_open, is_public
from broker.server.config import broker_config_from_dict
from broker.testing.zkserver import ServerTls, render_zoo_cfg

OWNER = digest_id("logferry", "s3cret")
CONSUMER = digest_id("consumers", "other")


def test_digest_id_is_zookeepers() -> None:
    assert digest_id("logferry", "s3cret") == make_digest_acl_credential("logferry", "s3cret")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "/brokers",
        "/brokers/ids",
        "/brokers/ids/3",
        "/brokers/topics/web",
        "/brokers/topics/web/partitions/0/state",
    ],
)
def test_public_paths_are_world_readable_and_owned(path: str) -> None:
    assert acls_for(path, OWNER) == [WORLD_READ, digest_acl(OWNER)]
    assert not is_open(acls_for(path, OWNER))


@pytest.mark.parametrize(
    "path",
    [
        "/acls",
        "/acls/allow|User:x|produce|topic|t",
        "/controller",
        "/controller_epoch",
        "/admin/preferred_replica_election",
        "/config/users/alice",
        "/brokersX",
        "/brokers/idsX",
        "/anything/new",
    ],
)
def test_everything_else_is_the_owners_only(path: str) -> None:
    assert acls_for(path, OWNER) == [digest_acl(OWNER)]
    assert not is_public(path)


def test_consumers_tree_is_shared_with_the_consumer_ids() -> None:
    for path in ("/consumers", "/consumers/g", "/consumers/g/offsets/t/0"):
        assert acls_for(path, OWNER, [CONSUMER]) == [digest_acl(OWNER), digest_acl(CONSUMER)]
    assert acls_for("/consumers/g", OWNER, [OWNER]) == [digest_acl(OWNER)]
    assert acls_for("/consumersX", OWNER, [CONSUMER]) == [digest_acl(OWNER)]


def test_a_client_copies_the_acl_of_consumers_for_what_it_creates_there() -> None:
    copied = (digest_acl(OWNER), digest_acl(CONSUMER))
    policy = AclPolicy(CONSUMER, (), copied)
    assert policy.acls_for("/consumers/g/ids/c1") == list(copied)
    assert policy.acls_for("/brokers/ids") == [WORLD_READ, digest_acl(CONSUMER)]


def test_is_open_tells_a_writable_world() -> None:
    assert is_open([ACL(Permissions.ALL, Id("world", "anyone"))])
    assert not is_open([WORLD_READ])


def test_zk_target_is_a_connect_string_carrying_its_security() -> None:
    security = ZkSecurity(user="u", password="hunter2")
    target = ZkTarget("127.0.0.1:2181/x", security)
    assert target == "127.0.0.1:2181/x" and isinstance(target, str)
    assert security_of(target) is security and security_of("127.0.0.1:2181/x") is None
    assert "hunter2" not in repr(security) + repr(target)  # the password stays out of reprs
    assert security_of(pickle.loads(pickle.dumps(target))) == security
    assert with_security("a:1/x", None) == "a:1/x" and type(with_security("a:1/x", None)) is str


def test_section_reads_the_password_from_a_file_or_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "zk.password"
    secret.write_text("s3cret\n")
    v = Validator(base_dir=tmp_path)
    got = zookeeper_from_table(v, {"user": "logferry", "password_file": "zk.password", "consumer_ids": [CONSUMER]})
    assert got == ZkSecurity("logferry", "s3cret", None, (CONSUMER,))
    assert got is not None and got.digest_id == OWNER and got.authenticated
    got = zookeeper_from_table(v, {"user": "logferry", "password_env": "ZKPW"}, env={"ZKPW": "s3cret"})
    assert got is not None and got.password == "s3cret"
    assert zookeeper_from_table(v, {}) is None


@pytest.mark.parametrize(
    "table, message",
    [
        ({"user": "u"}, "zookeeper.password_file: missing"),
        ({"password_file": "f"}, "zookeeper.user: missing"),
        ({"user": "u", "password_file": "f", "password_env": "E"}, "not both"),
        ({"user": "u", "password_file": "nope"}, "no such file"),
        ({"user": "u", "password_env": "UNSET_X"}, "UNSET_X is not set"),
        ({"user": "a b", "password_env": "E"}, "not a ZooKeeper digest user name"),
        ({"consumer_ids": ["consumers:short"]}, "zookeeper.consumer_ids[0]"),
    ],
)
def test_section_errors_name_the_key(tmp_path: Path, table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        zookeeper_from_table(Validator(base_dir=tmp_path), table, env={"E": "x"})


def test_broker_config_takes_a_zookeeper_section(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret")
    config = broker_config_from_dict(
        {
            "broker": {"id": 1, "log_dirs": [str(tmp_path)], "zk_connect": "127.0.0.1:2181/c"},
            "zookeeper": {"user": "logferry", "password_file": str(tmp_path / "pw")},
        }
    )
    assert config.zk_connect == "127.0.0.1:2181/c"
    security = security_of(config.zk_connect)
    assert security is not None and security.user == "logferry"
    with pytest.raises(ConfigError, match="zookeeper.pasword_file: unknown key"):
        broker_config_from_dict(
            {
                "broker": {"id": 1, "log_dirs": [str(tmp_path)], "zk_connect": "127.0.0.1:2181/c"},
                "zookeeper": {"user": "logferry", "pasword_file": "pw"},
            }
        )


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_zk_args(parser)
    return parser.parse_args(list(argv))


def test_cli_options_make_the_same_security(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGFERRY_ZK_USER", raising=False)
    monkeypatch.delenv("LOGFERRY_ZK_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("LOGFERRY_ZK_TLS_CA", raising=False)
    assert zk_security_from_args(_args()) is None
    assert type(zk_target(_args(), "a:1/x")) is str
    (tmp_path / "pw").write_text("s3cret\n")
    got = zk_security_from_args(_args("--zk-user", "logferry", "--zk-password-file", str(tmp_path / "pw")))
    assert got == ZkSecurity("logferry", "s3cret")
    with pytest.raises(ConfigError, match="^--zk-password-file: missing"):
        zk_security_from_args(_args("--zk-user", "logferry"))
    with pytest.raises(ConfigError, match="^--zk-tls-ca: .*no such file"):
        zk_security_from_args(_args("--zk-tls-ca", str(tmp_path / "nope.pem")))
    monkeypatch.setenv("LOGFERRY_ZK_USER", "logferry")
    monkeypatch.setenv("LOGFERRY_ZK_PASSWORD_FILE", str(tmp_path / "pw"))
    assert security_of(zk_target(_args(), "a:1/x")) == ZkSecurity("logferry", "s3cret")


def test_zoo_cfg_with_tls_uses_netty_and_a_pem_keystore(tmp_path: Path) -> None:
    tls = ServerTls(2281, tmp_path / "zk.pem", tmp_path / "zk.key", tmp_path / "ca.pem", "required")
    text = render_zoo_cfg(tmp_path, 2181, tls=tls)
    lines = set(text.splitlines())
    assert {
        "clientPort=2181",
        "secureClientPort=2281",
        "secureClientPortAddress=127.0.0.1",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"ssl.keyStore.location={tmp_path / 'zk-keystore.pem'}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={tmp_path / 'ca.pem'}",
        "ssl.trustStore.type=PEM",
        "ssl.clientAuth=need",
    } <= lines
    assert "secureClientPort" not in render_zoo_cfg(tmp_path, 2181)
    assert "ssl.clientAuth=none" in render_zoo_cfg(
        tmp_path, 2181, tls=ServerTls(2281, tmp_path / "zk.pem", tmp_path / "zk.key")
    )


def test_server_tls_checks_and_writes_the_keystore(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperError, match="needs a CA"):
        ServerTls(2281, tmp_path / "a", tmp_path / "b", None, "required")
    with pytest.raises(ZooKeeperError, match="out of range"):
        ServerTls(70000, tmp_path / "a", tmp_path / "b")
    (tmp_path / "zk.key").write_text("-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----\n")
    (tmp_path / "zk.pem").write_text("-----BEGIN CERTIFICATE-----\nc\n-----END CERTIFICATE-----\n")
    path = ServerTls(2281, tmp_path / "zk.pem", tmp_path / "zk.key").write_keystore(tmp_path)
    assert path.read_text().index("PRIVATE KEY") < path.read_text().index("CERTIFICATE")
    assert path.stat().st_mode & 0o777 == 0o600


def test_server_hostname_is_refused_toward_zookeeper(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError, match="zookeeper.tls.server_hostname: not supported"):
        zookeeper_from_table(
            Validator(base_dir=tmp_path), {"tls": {"enabled": True, "ca_file": "ca.pem", "server_hostname": "zk"}}
        )


def test_agent_mirror_and_loader_configs_carry_their_zookeeper_section(tmp_path: Path) -> None:
    from agent.config import parse_config as agent_config
    from hadoop_loader.config import config_from_dict as loader_config
    from mirror.config import parse_config as mirror_config

    (tmp_path / "pw").write_text("s3cret\n")
    login = {"user": "consumers", "password_file": str(tmp_path / "pw")}
    agent = agent_config(
        {
            "state_dir": str(tmp_path),
            "cluster": {"zk": "h:1/live"},
            "zookeeper": login,
            "sources": [{"pattern": str(tmp_path / "a.log"), "topic": "web"}],
        }
    )
    assert security_of(agent.zk) == ZkSecurity("consumers", "s3cret")
    mirror = mirror_config(
        {
            "source": {"zk_connect": "h:1/live", "zookeeper": login},
            "target": {"zk_connect": "h:1/analysis"},
            "mirror": {"topics": ["web"]},
        }
    )
    assert security_of(mirror.source_zk) == ZkSecurity("consumers", "s3cret")
    assert security_of(mirror.target_zk) is None
    loader = loader_config(
        {
            "source": {"zk": "h:1/analysis", "topics": ["web"], "zookeeper": login},
            "output": {"uri": str(tmp_path / "lake")},
        }
    )
    assert security_of(loader.source.zk) == ZkSecurity("consumers", "s3cret")
