"""Topic naming (no path traversal) and partition placement."""

import pytest

from broker.common.errors import ConfigError, InvalidTopicError
from broker.common.names import (
    NAME_RULE,
    is_valid_name,
    parse_partition_dir_name,
    partition_dir_name,
    validate_group_name,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["a", "access-log", "app.errors_v2", "A" * 249, "..x", "-"])
def test_legal_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "a b", "ü", "A" * 250, "x\x00", None, 5])
def test_illegal_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_partition_dir_names_round_trip():
    assert parse_partition_dir_name(partition_dir_name("web-access", 12)) == ("web-access", 12)
    assert parse_partition_dir_name("lost+found") is None
    assert parse_partition_dir_name("topic-x") is None


@pytest.mark.parametrize("name", ["a", "mirror.live-1_a", "G" * 249])
def test_group_names_follow_the_same_rule(name):
    assert is_valid_name(name)
    assert validate_group_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "a\n", None])
def test_illegal_group_names_and_consumer_ids_say_which(name):
    assert not is_valid_name(name)
    with pytest.raises(ConfigError, match="group name"):
        validate_group_name(name)
    with pytest.raises(ConfigError, match="consumer id"):
        validate_group_name(name, "consumer id")


def test_long_names_are_shortened_in_messages():
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name("/" * 10_000)
    assert len(str(info.value)) < 200 and NAME_RULE in str(info.value)


@pytest.mark.parametrize("name", ["ok.topic-1", "..", "a b", "a\n", "t" * 250])
def test_every_config_applies_the_one_rule(name):
    """The agent, mirror and loader configs accept exactly the names the broker does."""
    from agent.config import parse_config as agent_config
    from agent.errors import ConfigError as AgentConfigError
    from hadoop_loader.config import config_from_dict as loader_config
    from hadoop_loader.errors import LoaderConfigError
    from mirror.config import parse_config as mirror_config
    from mirror.errors import MirrorConfigError

    agent = {
        "state_dir": "/tmp/x",
        "cluster": {"brokers": ["127.0.0.1:9092"]},
        "sources": [{"pattern": "/var/log/*.log", "topic": name}],
    }
    mirror = {
        "source": {"zk_connect": "h:1/live"},
        "target": {"zk_connect": "h:1/analysis"},
        "mirror": {"topics": ["a"], "group": name},
    }
    loader = {"source": {"zk": "h:1/analysis", "topics": [name]}, "output": {"uri": "file:///tmp/x"}}
    checks = [
        (lambda: agent_config(agent), AgentConfigError, "not a valid topic name"),
        (lambda: loader_config(loader), LoaderConfigError, "not a valid topic name"),
        (lambda: mirror_config(mirror), MirrorConfigError, "mirror.group"),
    ]
    for check, error, says in checks:
        if is_valid_name(name):
            check()
        else:
            with pytest.raises(error, match=says):
                check()
