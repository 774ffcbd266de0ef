"""Broker configuration: the shipped examples load; every mistake names its key."""

from pathlib import Path

import pytest

from broker.common.errors import ConfigError
from broker.server.config import broker_config_from_dict, config_warnings, load_broker_config

ROOT = Path(__file__).resolve().parents[2]
BROKER_CONFIGS = sorted((ROOT / "etc").glob("*/broker-*.toml"))


def _base(**broker):
    data = {"broker": {"id": 1, "log_dirs": ["/tmp/x"], "zk_connect": "127.0.0.1:2181/t"}, "log": {}}
    data["broker"].update(broker)
    return data


@pytest.mark.parametrize("path", BROKER_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_broker_configs_validate(path):
    config = load_broker_config(path)
    assert config.port > 0 and config.log_dirs


def test_shipped_configs_exist():
    assert len(BROKER_CONFIGS) >= 3


def test_defaults_and_retention_hours():
    data = _base()
    data["log"] = {"retention_hours": 2, "flush_messages": 1}
    config = broker_config_from_dict(data)
    assert config.log.retention_ms == 2 * 3600 * 1000
    assert config.log.flush_messages == 1
    assert config.port == 9092 and config.auto_create_topics is True


@pytest.mark.parametrize(
    "broker,log,needle",
    [
        ({"port": 70000}, {}, "broker.port"),
        ({"default_replication_factor": 0}, {}, "broker.default_replication_factor"),
        ({"min_insync_replicas": "2"}, {}, "broker.min_insync_replicas"),
        ({"leader_rebalance_interval_s": -1}, {}, "broker.leader_rebalance_interval_s"),
        ({"unclean_leader_election": "no"}, {}, "broker.unclean_leader_election"),
        ({"rack": ""}, {}, "broker.rack"),
        ({"id": -1}, {}, "broker.id"),
        ({"log_dirs": []}, {}, "broker.log_dirs"),
        ({"zk_connect": "nohostport"}, {}, "broker.zk_connect"),
        ({"auto_create_topics": "yes"}, {}, "broker.auto_create_topics"),
        ({"max_queued_request_bytes": 0}, {}, "broker.max_queued_request_bytes"),
        ({"max_unsent_bytes_per_connection": "8M"}, {}, "broker.max_unsent_bytes_per_connection"),
        ({"incomplete_request_timeout_ms": -1}, {}, "broker.incomplete_request_timeout_ms"),
        ({"max_connections": 0}, {}, "broker.max_connections"),
        ({"colour": "blue"}, {}, "broker.colour"),
        ({}, {"segment_bytes": 0}, "log.segment_bytes"),
        ({}, {"retention_bytes": -5}, "log.retention_bytes"),
        ({}, {"flush_ms": "fast"}, "log.flush_ms"),
        ({}, {"visibility": "eventually"}, "log.visibility"),
    ],
)
def test_errors_name_the_key(broker, log, needle):
    data = _base(**broker)
    data["log"] = log
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        broker_config_from_dict(data)


def test_missing_required_key():
    data = _base()
    del data["broker"]["zk_connect"]
    with pytest.raises(ConfigError, match="broker.zk_connect: missing"):
        broker_config_from_dict(data)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_broker_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[broker\nid = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_broker_config(bad)


def test_warns_when_acks_all_may_time_out_before_a_dead_follower_leaves_the_isr():
    assert config_warnings(broker_config_from_dict(_base())) == []  # the defaults are sound
    for timeout in (10_000, 5_000):
        (warning,) = config_warnings(
            broker_config_from_dict(_base(acks_all_timeout_ms=timeout, replica_lag_time_max_ms=10_000))
        )
        assert warning.startswith(f"acks_all_timeout_ms ({timeout}) is not longer than replica_lag_time_max_ms (10000)")
    assert (
        config_warnings(broker_config_from_dict(_base(acks_all_timeout_ms=10_001, replica_lag_time_max_ms=10_000)))
        == []
    )


def test_warns_when_the_request_budget_is_smaller_than_one_request():
    (warning,) = config_warnings(
        broker_config_from_dict(_base(max_request_bytes=64 << 20, max_queued_request_bytes=32 << 20))
    )
    assert warning.startswith("max_queued_request_bytes (33554432) is smaller than max_request_bytes (67108864)")
