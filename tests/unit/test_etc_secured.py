"""The secured two-datacenter example (etc/secured/) loads with each component's loader.

The examples name certificates and password files under /etc/logferry, as a real
deployment would; the loaders read those files at load (a missing one stops the process
at start), so each test copies etc/secured/ to a temporary directory, makes the files the
README's commands would make (a CA and certificates with ``broker.common.certs``, password
files of mode 0600) and rewrites /etc/logferry/ to point there.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from agent.config import load_config as load_agent_config
from broker.common import certs
from broker.server.config import config_warnings, load_broker_config
from hadoop_loader.config import load_config as load_loader_config
from mirror.config import load_config as load_mirror_config

SECURED = Path(__file__).resolve().parents[2] / "etc" / "secured"
BROKERS = ["live/broker-1.toml", "live/broker-2.toml", "analysis/broker-1.toml"]
PASSWORDS = [
    "broker",
    "agent",
    "mirror-live",
    "mirror-analysis",
    "loader",
    # ZooKeeper logins (README step 2)
    "zk-logferry-live",
    "zk-logferry-analysis",
    "zk-agent",
    "zk-mirror-live",
    "zk-mirror-analysis",
    "zk-loader",
    "zk-dashboard-live",
]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """etc/secured/ with its certificates and password files made, under one temp dir."""
    root = tmp_path_factory.mktemp("secured")
    etc = root / "etc"
    shutil.copytree(SECURED, etc)
    for path in etc.rglob("*.toml"):
        path.write_text(path.read_text().replace("/etc/logferry/", f"{root}/"))
    (root / "certs").mkdir()
    (root / "secrets").mkdir()
    ca = certs.make_ca("example CA")
    (root / "certs" / "ca.pem").write_bytes(ca.cert_pem)
    for name in ("broker-1", "broker-2", "analysis-broker-1"):
        issued = certs.issue(ca.cert_pem, ca.key_pem, name, [f"{name}.example"])
        (root / "certs" / f"{name}.pem").write_bytes(issued.cert_pem)
        (root / "certs" / f"{name}.key").write_bytes(issued.key_pem)
        (root / "certs" / f"{name}.key").chmod(0o600)
    for name in PASSWORDS:
        path = root / "secrets" / f"{name}.password"
        path.write_text(f"not-a-real-{name}-password\n")
        path.chmod(0o600)
    return etc


def test_every_secured_file_is_checked():
    files = {str(p.relative_to(SECURED)) for p in SECURED.rglob("*") if p.is_file()}
    assert files == {*BROKERS, "agent.toml", "mirror.toml", "loader.toml", "README.md"}


@pytest.mark.parametrize("name", BROKERS)
def test_secured_brokers_require_tls_scram_and_acls(deployed: Path, name: str, caplog):
    caplog.set_level(logging.WARNING)
    config = load_broker_config(deployed / name)
    assert config.tls is not None and config.auth is not None and config.auth.required
    assert config.authorizer.enabled
    assert "User:broker" in config.authorizer.super_users
    assert config.datacenter == name.split("/")[0]
    assert config_warnings(config) == []
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_live_followers_authenticate_as_the_super_user(deployed: Path):
    for name in BROKERS[:2]:
        config = load_broker_config(deployed / name)
        assert config.sasl is not None and config.sasl.username == "broker"


def test_secured_clients_use_tls_and_their_own_principal(deployed: Path, caplog):
    caplog.set_level(logging.WARNING)
    agent = load_agent_config(deployed / "agent.toml")
    mirror = load_mirror_config(deployed / "mirror.toml")
    loader = load_loader_config(deployed / "loader.toml")
    assert agent.tls is not None and agent.sasl is not None and agent.sasl.username == "agent"
    assert mirror.source_tls and mirror.target_tls
    assert mirror.source_sasl and mirror.target_sasl
    assert mirror.source_sasl.username == mirror.target_sasl.username == "mirror"
    assert loader.tls is not None and loader.sasl is not None
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for topic in {s.topic for s in agent.sources} | {agent.audit.topic}:
        assert mirror.matches(topic)


def test_every_secured_config_logs_in_to_zookeeper_as_its_own_principal(deployed: Path):
    """Brokers as the cluster's owner (listing the group logins), every client under its
    principal's name, so ZooKeeper enforces the group ACLs (docs/security.md)."""
    from broker.common.zk_security import security_of

    for name in BROKERS:
        zk = security_of(load_broker_config(deployed / name).zk_connect)
        assert zk is not None and zk.authenticated and zk.user == "logferry", name
        assert {i.partition(":")[0] for i in zk.consumer_ids} == (
            {"mirror", "dashboard"} if name.startswith("live") else set()
        )
    agent = load_agent_config(deployed / "agent.toml")
    mirror = load_mirror_config(deployed / "mirror.toml")
    loader = load_loader_config(deployed / "loader.toml")
    logins = {
        "agent": security_of(agent.zk),
        "mirror source": security_of(mirror.source_zk),
        "mirror target": security_of(mirror.target_zk),
        "loader": security_of(loader.source.zk),
    }
    for who, security in logins.items():
        assert security is not None and security.authenticated, who
        assert security.user == who.split()[0], who
    assert security_of(mirror.source_zk).password != security_of(mirror.target_zk).password


def test_readme_runs_the_group_acls_as_the_zookeeper_owner():
    text = (SECURED / "README.md").read_text()
    for line in re.findall(r"^.*acl add .*--group.*$", text, re.M):
        assert "$LIVE_OWNER" in line, line
    assert "logferry zk digest --user mirror" in text


def test_readme_grants_each_principal_what_its_config_needs():
    """The README's ACLs: the agent produces its topics and _audit only; the mirror
    consumes the live topics and produces the analysis ones; the loader and the
    dashboards only consume."""
    text = (SECURED / "README.md").read_text()
    grants = re.findall(
        r"acl add .*?--principal (User:\S+)\s+((?:--operation \S+\s+)+)--topic (\S+)", text.replace("\\\n", " ")
    )
    loop = re.search(r"for t in ([^;]+); do", text)
    assert loop, "the README grants ACLs in a `for t in TOPICS; do` loop"
    loop_topics = loop.group(1).split()
    allowed: dict[str, set[tuple[str, str]]] = {}
    for principal, ops, topic in grants:
        names = loop_topics if topic == "$t" else [topic]
        for op in re.findall(r"--operation (\S+)", ops):
            allowed.setdefault(principal, set()).update((op, name) for name in names)
    topics = {"app-logs", "access-logs", "_audit"}
    assert {t for op, t in allowed["User:agent"]} == topics
    assert {op for op, t in allowed["User:agent"]} == {"produce"}
    assert {op for op, t in allowed["User:loader"]} == {"consume"}
    assert {op for op, t in allowed["User:dashboard"]} == {"consume"}
    assert {op for op, t in allowed["User:mirror"]} >= {"consume", "produce"}
    assert "delete" not in {op for ops in allowed.values() for op, _ in ops}
    for command in ("logferry certs ca", "logferry certs issue", "logferry user create"):
        assert command in text
