"""Every example config in etc/ loads and validates with its component's own loader.

These are the files a user copies for a real deployment and the files `logferry demo`
starts from, so they must stay valid as the components evolve. A new file in etc/
must be claimed by a loader below (test_every_file_in_etc_is_checked). The last tests
check that the examples fit together as one two-datacenter deployment.
"""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path

import pytest

from agent.config import load_config as load_agent_config
from broker.server.config import config_warnings, load_broker_config
from broker.testing.zkserver import LocalZooKeeper, read_cfg
from hadoop_loader.config import load_config as load_loader_config
from mirror.config import load_config as load_mirror_config

ETC = Path(__file__).resolve().parents[2] / "etc"

BROKERS = sorted(ETC.glob("live/broker-*.toml")) + sorted(ETC.glob("analysis/broker-*.toml"))
AGENT = ETC / "agent.toml"
MIRROR = ETC / "mirror.toml"
LOADER = ETC / "loader.toml"
ZOO_CFG = ETC / "zookeeper" / "zoo.cfg"
ZK_LOG4J = ETC / "zookeeper" / "log4j.properties"
CRON = sorted(p for p in (ETC / "cron").glob("*") if p.is_file())
SYSTEMD = sorted(p for p in (ETC / "systemd").glob("*") if p.is_file())  # test_systemd_units.py
# test_console_etc.py: the console config, the Prometheus alert rules, the Grafana dashboard.
CONSOLE = [
    ETC / "console.toml",
    ETC / "prometheus" / "logferry-alerts.yml",
    ETC / "grafana" / "logferry-dashboard.json",
]
SECURED = {p for p in (ETC / "secured").rglob("*") if p.is_file()}  # test_etc_secured.py
CHECKED = {*BROKERS, AGENT, MIRROR, LOADER, ZOO_CFG, ZK_LOG4J, *CRON, *SYSTEMD, *CONSOLE, *SECURED}


def test_every_file_in_etc_is_checked():
    files = {p for p in ETC.rglob("*") if p.is_file() and not p.name.startswith(".")}
    unclaimed = sorted(str(p.relative_to(ETC)) for p in files - CHECKED)
    assert not unclaimed, f"add a validation test for {unclaimed}"


@pytest.mark.parametrize("path", BROKERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_broker_config_validates(path):
    config = load_broker_config(path)
    assert config.datacenter == path.parent.name
    assert config.zk_connect.endswith(f"/logferry/{path.parent.name}")


def test_every_example_config_loads_without_a_warning(caplog):
    """Loading logs nothing at WARNING, and no broker draws a start-up warning (docs say why)."""
    caplog.set_level(logging.DEBUG)
    brokers = [load_broker_config(path) for path in BROKERS]
    load_agent_config(AGENT), load_mirror_config(MIRROR), load_loader_config(LOADER)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warned
    for path, config in zip(BROKERS, brokers, strict=True):
        assert config_warnings(config) == [], f"{path.relative_to(ETC)} would warn at start"


def test_both_datacenters_have_brokers():
    assert len(list(ETC.glob("live/broker-*.toml"))) >= 2
    assert len(list(ETC.glob("analysis/broker-*.toml"))) >= 1


@pytest.mark.parametrize("datacenter", ["live", "analysis"])
def test_broker_ids_and_addresses_are_unique_per_cluster(datacenter):
    configs = [load_broker_config(p) for p in ETC.glob(f"{datacenter}/broker-*.toml")]
    assert len({c.broker_id for c in configs}) == len(configs)
    assert len({(c.host, c.port) for c in configs}) == len(configs)
    assert len({d for c in configs for d in c.log_dirs}) == sum(len(c.log_dirs) for c in configs)


def test_agent_config_validates():
    config = load_agent_config(AGENT)
    assert config.sources
    assert config.zk and config.zk.endswith("/logferry/live")
    assert config.audit.enabled


def test_agent_joins_java_stack_traces_into_one_message():
    source = next(s for s in load_agent_config(AGENT).sources if s.multiline)
    start = source.multiline.start
    assert start.search(b"2026-01-05 12:00:00,123 ERROR [main] com.example.Shop: failed")
    for continuation in (
        b"java.lang.IllegalStateException: boom",
        b"\tat com.example.Shop.run(Shop.java:42)",
        b"Caused by: x",
        b"\t... 3 more",
    ):
        assert not start.search(continuation)


def test_mirror_config_validates():
    config = load_mirror_config(MIRROR)
    assert config.source_zk.endswith("/logferry/live")
    assert config.target_zk.endswith("/logferry/analysis")


def test_loader_config_validates():
    config = load_loader_config(LOADER)
    assert config.source.topics
    assert config.source.zk and config.source.zk.endswith("/logferry/analysis")
    assert config.audit.enabled


def test_zookeeper_config_is_a_standalone_server_on_loopback():
    settings = {}
    for line in ZOO_CFG.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"not key=value: {line!r}"
            settings[key.strip()] = value.strip()
    assert int(settings["clientPort"]) > 0
    assert settings["clientPortAddress"] == "127.0.0.1"
    assert int(settings["tickTime"]) > 0 and settings["dataDir"].startswith("/")


# Where the example and what `logferry zk start` writes may differ, and why (the comment
# at the top of etc/zookeeper/zoo.cfg says the same).
ZK_START_ONLY: dict[str, str] = {}
ZOO_CFG_ONLY = {
    "initLimit": "ensemble only: a standalone server ignores it",
    "syncLimit": "ensemble only: a standalone server ignores it",
}
ZOO_CFG_DIFFERENT = {
    "dataDir": "the --data-dir of `logferry zk start`",
    "tickTime": "500 ms there, so tests can ask for 1 s sessions",
}


def test_zoo_cfg_has_the_settings_logferry_zk_start_writes(tmp_path):
    local = LocalZooKeeper(tmp_path / "zk", 2181)  # as `logferry zk start` makes it
    local.write_config()
    written, shipped = read_cfg(local.config_path), read_cfg(ZOO_CFG)
    assert {k: v for k, v in written.items() if k not in shipped} == ZK_START_ONLY
    assert set(shipped) - set(written) == set(ZOO_CFG_ONLY)
    differ = {k for k in set(shipped) & set(written) if shipped[k] != written[k]}
    assert differ == set(ZOO_CFG_DIFFERENT), {k: (shipped[k], written[k]) for k in differ}
    comments = "\n".join(line for line in ZOO_CFG.read_text().splitlines() if line.startswith("#"))
    for key in {**ZOO_CFG_ONLY, **ZOO_CFG_DIFFERENT}:
        assert key in comments, f"etc/zookeeper/zoo.cfg must say why its {key} differs"


@pytest.mark.parametrize("path", CRON, ids=lambda p: p.name)
def test_cron_entries_run_logferry(path):
    entries = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#") and not re.match(r"^\s*[A-Z_]+=", line)
    ]
    assert entries, f"{path.name} has no cron entry"
    for line in entries:
        fields = line.split()
        assert len(fields) > 6, f"not a cron.d line (5 times, user, command): {line!r}"
        assert "logferry" in line


# -- the examples as one deployment ------------------------------------------------------------


def test_mirror_copies_what_the_agents_publish_and_the_audit_topic():
    agent, mirror = load_agent_config(AGENT), load_mirror_config(MIRROR)
    for topic in {s.topic for s in agent.sources} | {agent.audit.topic}:
        assert mirror.matches(topic), f"the mirror would not copy {topic!r}"


def test_loader_audits_the_agents_audit_topic():
    agent, loader = load_agent_config(AGENT), load_loader_config(LOADER)
    assert loader.audit.topic == agent.audit.topic


def test_loader_lands_the_topics_the_agents_publish():
    agent, loader = load_agent_config(AGENT), load_loader_config(LOADER)
    assert set(loader.source.topics) == {s.topic for s in agent.sources}


def test_example_ports_do_not_collide_on_one_machine():
    ports: dict[int, str] = {}
    for path in BROKERS:
        with path.open("rb") as f:
            broker = tomllib.load(f)["broker"]
        for key in ("port", "metrics_port"):
            port = broker.get(key, 0)
            if port:
                assert port not in ports, f"{path.name} {key} {port} is also {ports[port]}"
                ports[port] = f"{path.parent.name}/{path.name} {key}"
    for path, section in ((AGENT, "metrics"), (MIRROR, "metrics")):
        with path.open("rb") as f:
            port = tomllib.load(f).get(section, {}).get("port", 0)
        if port:
            assert port not in ports, f"{path.name} metrics port {port} is also {ports[port]}"
            ports[port] = path.name


def test_zk_chroots_are_one_per_datacenter():
    chroot = re.compile(r"^[^/]+(/logferry/(live|analysis))$")
    for path in BROKERS:
        assert chroot.match(load_broker_config(path).zk_connect)
