"""The secured demo's pieces that need no process: who gets which ACL, and that the
config sections it writes load with each component's own loader."""

from __future__ import annotations

import stat
from pathlib import Path

from agent.config import load_config as load_agent_config
from broker.common.config import dumps
from broker.common.zk_security import security_of
from broker.server.config import load_broker_config
from broker.testing.security import password_file
from demo.security import ANALYSIS_USERS, LIVE_USERS, ZK_LOGINS, ZK_OWNER, DemoSecurity, grants
from mirror.config import load_config as load_mirror_config

TOPICS = ["app-logs", "access-logs", "_audit"]


def test_each_principal_gets_only_what_its_job_needs():
    acls = grants(TOPICS)
    live = {(p, op) for p, op, _ in acls["live"]}
    analysis = {(p, op) for p, op, _ in acls["analysis"]}
    assert live == {
        ("User:agent", "produce"),
        ("User:agent", "create"),
        ("User:mirror", "consume"),
        ("User:dashboard", "consume"),
        ("User:reader", "consume"),
    }
    assert analysis == {
        ("User:mirror", "produce"),
        ("User:mirror", "create"),
        ("User:mirror", "alter"),
        ("User:loader", "consume"),
        ("User:reader", "consume"),
    }
    # the agents may create only their heartbeat topic; nobody else creates on live
    assert {t for p, op, t in acls["live"] if op == "create"} == {"_agents"}
    assert {t for _, _, t in acls["live"]} == {*TOPICS, "_agents"}
    assert {t for _, _, t in acls["analysis"]} == {*TOPICS, "_audit.mirror"}


def test_password_files_are_private_from_creation(tmp_path: Path):
    path, password = password_file(tmp_path, "agent-live")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == password + "\n" and len(password) >= 24
    _, other = password_file(tmp_path, "mirror-live")
    assert other != password


def _security(tmp_path: Path) -> DemoSecurity:
    security = DemoSecurity(tmp_path)
    for users, dc in ((LIVE_USERS, "live"), (ANALYSIS_USERS, "analysis")):
        for user in users:
            security.passwords[(user, dc)] = password_file(security.secrets, f"{user}-{dc}")
        for login in (ZK_OWNER, *ZK_LOGINS[dc]):
            security.zk_passwords[(login, dc)] = password_file(security.secrets, f"zk-{login}-{dc}")
    return security


def test_the_sections_load_with_the_components_loaders(tmp_path: Path):
    security = _security(tmp_path)
    broker = tmp_path / "broker.toml"
    broker.write_text(
        dumps(
            {
                "broker": {
                    "id": 1,
                    "host": "127.0.0.1",
                    "port": 9092,
                    "log_dirs": [str(tmp_path / "data")],
                    "zk_connect": "127.0.0.1:2181/logferry/live",
                },
                **security.broker_sections("live"),
            }
        )
    )
    config = load_broker_config(broker)
    assert config.tls and config.auth and config.auth.required and config.authorizer.enabled
    assert config.sasl and config.sasl.username == "broker"
    agent = tmp_path / "agent.toml"
    agent.write_text(
        dumps(
            {
                "state_dir": str(tmp_path / "state"),
                "cluster": {"zk": "127.0.0.1:2181/logferry/live"},
                "sources": [{"pattern": "/tmp/x.log", "topic": "app-logs"}],
                **security.client_sections("agent", "live"),
            }
        )
    )
    loaded = load_agent_config(agent)
    assert loaded.tls and loaded.sasl and loaded.sasl.username == "agent"
    mirror = tmp_path / "mirror.toml"
    mirror.write_text(
        dumps(
            {
                "source": {"zk_connect": "127.0.0.1:2181/logferry/live", **security.client_sections("mirror", "live")},
                "target": {
                    "zk_connect": "127.0.0.1:2181/logferry/analysis",
                    **security.client_sections("mirror", "analysis"),
                },
                "mirror": {"group": "m", "pattern": ".*"},
            }
        )
    )
    m = load_mirror_config(mirror)
    assert m.source_sasl and m.target_sasl and m.source_sasl.password != m.target_sasl.password
    # ZooKeeper: the broker as the owner listing the group logins, each client as itself
    owner = security_of(config.zk_connect)
    assert owner is not None and owner.user == ZK_OWNER and owner.password
    assert sorted(i.partition(":")[0] for i in owner.consumer_ids) == ["dashboard", "mirror", "reader"]
    for who, connect in (("agent", loaded.zk), ("mirror", m.source_zk), ("mirror", m.target_zk)):
        login = security_of(connect)
        assert login is not None and login.user == who and login.password
    assert security_of(m.source_zk).password != security_of(m.target_zk).password
    assert security_of(m.source_zk).password != m.source_sasl.password
    client = security.client("reader", "analysis")
    assert client["sasl"].username == "reader" and client["tls"].ca_file == security.pki.ca


def test_the_consoles_clusters_load_as_the_read_only_reader(tmp_path: Path):
    from console.config import load_config as load_console_config

    security = _security(tmp_path)
    console = tmp_path / "console.toml"
    console.write_text(
        dumps(
            {
                "console": {"port": 0},
                "cluster": [
                    {
                        "name": dc,
                        "zk_connect": f"127.0.0.1:2181/logferry/{dc}",
                        **security.client_sections("reader", dc),
                    }
                    for dc in ("live", "analysis")
                ],
            }
        )
    )
    clusters = load_console_config(console).clusters
    assert [(c.sasl.username if c.sasl else None) for c in clusters] == ["reader", "reader"]
    assert all(c.tls and c.tls.ca_file == security.pki.ca for c in clusters)
    assert [getattr(security_of(c.zk_connect), "user", None) for c in clusters] == ["reader", "reader"]
