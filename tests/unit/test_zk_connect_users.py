"""Every place that takes a ZooKeeper connect string refuses a malformed one the same way:
the broker, agent, mirror and loader configs (naming the key), the loader's ``zk``
option, the CLI's ``--zk`` (and ``$LOGFERRY_ZK``) and zk.connect, all through
broker.common.zk_connect."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import pytest

from agent.config import parse_config as agent_config
from agent.errors import ConfigError as AgentConfigError
from broker.cli.client_cmds import cluster_kwargs
from broker.common.errors import ConfigError
from broker.coordination import zk
from broker.server.config import broker_config_from_dict
from hadoop_loader.config import config_from_dict as loader_config
from hadoop_loader.errors import LoaderConfigError
from hadoop_loader.options import parse_options
from mirror.config import parse_config as mirror_config
from mirror.errors import MirrorConfigError

BAD = "127.0.0.1:2181/logferry//live"
NAMED = "chroot '/logferry//live' has an empty segment"


def test_broker_config() -> None:
    data = {"broker": {"id": 1, "log_dirs": ["/tmp/x"], "zk_connect": BAD}}
    with pytest.raises(ConfigError, match="broker.zk_connect: ZooKeeper connect string") as info:
        broker_config_from_dict(data)
    assert NAMED in str(info.value)


def test_broker_connect_timeout_is_configurable() -> None:
    data: dict[str, Any] = {"broker": {"id": 1, "log_dirs": ["/tmp/x"], "zk_connect": "h:1/c"}}
    assert broker_config_from_dict(data).zk_connect_timeout_s == zk.CONNECT_TIMEOUT_S
    data["broker"]["zk_connect_timeout_s"] = 30
    assert broker_config_from_dict(data).zk_connect_timeout_s == 30


def test_agent_config() -> None:
    doc = {
        "state_dir": "/tmp/x",
        "cluster": {"zk": "h:2181,h2/x"},
        "sources": [{"pattern": "/var/log/*.log", "topic": "app"}],
    }
    with pytest.raises(AgentConfigError, match="cluster.zk: .*'h2' has no port"):
        agent_config(doc)


def test_mirror_config() -> None:
    doc = {
        "source": {"zk_connect": "h:1/live"},
        "target": {"zk_connect": "h:99999/analysis"},
        "mirror": {"group": "m", "topics": ["a"]},
    }
    with pytest.raises(MirrorConfigError, match="target.zk_connect: .*port 99999 .* out of range"):
        mirror_config(doc)


def test_loader_config_and_option() -> None:
    doc = {"source": {"zk": "h:1/x/", "topics": ["a"]}, "output": {"uri": "file:///tmp/wh"}}
    with pytest.raises(LoaderConfigError, match="source.zk: .*chroot '/x/' ends with '/'"):
        loader_config(doc)
    with pytest.raises(LoaderConfigError, match="option zk: .*'h' has no port"):
        parse_options({"zk": "h/x", "topics": "a"})


def _args(zk_value: str | None) -> argparse.Namespace:
    return argparse.Namespace(zk=zk_value, brokers=None)


def test_cli_zk_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cluster_kwargs(_args("h:1/x")) == {"zk": "h:1/x"}
    with pytest.raises(ConfigError, match=r"^--zk: ZooKeeper connect string 'h:1 /x'"):
        cluster_kwargs(_args("h:1 /x"))
    monkeypatch.setenv("LOGFERRY_ZK", "nohost")
    with pytest.raises(ConfigError, match=r"^\$LOGFERRY_ZK: .*'nohost' has no port"):
        cluster_kwargs(_args(None))


def test_connect_validates_before_any_io() -> None:
    with pytest.raises(ConfigError, match="'h' has no port"):
        zk.connect("h/x", create=False)


def test_kazoo_is_quiet_while_connecting_and_heard_after(caplog: pytest.LogCaptureFixture) -> None:
    logger = zk._ConnectQuietLogger()
    with caplog.at_level(logging.INFO, logger="kazoo"):
        logger.warning("Connection dropped: %s", "refused")
        logger.info("Connecting to %s", "h")
        logger.error("kept: %s", "an error")
        logger.connecting = False
        logger.warning("Connection dropped: %s", "after")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("kazoo.client", "ERROR", "kept: an error"),
        ("kazoo.client", "WARNING", "Connection dropped: after"),
    ]
