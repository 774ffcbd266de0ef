"""Loader config validation: good files load, every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hadoop_loader.config import config_from_dict, load_config, normalize_uri
from hadoop_loader.errors import LoaderConfigError

REPO = Path(__file__).resolve().parents[2]


def minimal(**sections):
    data = {
        "source": {"zk": "127.0.0.1:2181/logferry/analysis", "topics": ["a", "b"]},
        "output": {"uri": "file:///tmp/wh"},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return data


def test_example_config_in_etc_is_valid():
    config = load_config(REPO / "etc" / "loader.toml")
    assert config.source.topics
    assert config.output.uri.startswith("file:///")


def test_defaults():
    config = config_from_dict(minimal())
    assert config.source.topics == ("a", "b")
    assert config.load.on_retention_gap == "fail"
    assert config.load.first_run == "earliest"
    assert config.output.files_per_hour == 1
    assert config.output.drop_decoded_values is True
    assert config.audit.enabled is False
    assert config.spark.master is None


def test_plain_relative_path_becomes_file_uri(tmp_path):
    uri = normalize_uri("wh/out", tmp_path, "output.uri")
    assert uri == (tmp_path / "wh" / "out").as_uri()
    assert normalize_uri("hdfs://nn:8020/data/wh/", None, "x") == "hdfs://nn:8020/data/wh"
    assert normalize_uri("file:///data/wh/", None, "x") == "file:///data/wh"


def test_decode_agent_records_true_means_every_topic():
    config = config_from_dict(minimal(source={"decode_agent_records": True}))
    assert config.source.decode_agent_records == {"a", "b"}
    config = config_from_dict(minimal(source={"decode_agent_records": ["b"]}))
    assert config.source.decode_agent_records == {"b"}


def test_spark_conf_values_become_strings():
    config = config_from_dict(minimal(spark={"conf": {"spark.sql.shuffle.partitions": 4, "spark.ui.enabled": False}}))
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}


@pytest.mark.parametrize(
    "sections, key",
    [
        ({"load": {"chunk_bytes": 0}}, "load.chunk_bytes"),
        ({"load": {"chunk_bytes": 1000}}, "load.chunk_bytes"),
        ({"load": {"max_bytes_per_partition": "1G"}}, "load.max_bytes_per_partition"),
        ({"load": {"on_retention_gap": "ignore"}}, "load.on_retention_gap"),
        ({"load": {"timezone": "Mars/Olympus"}}, "load.timezone"),
        ({"load": {"bogus": 1}}, "load.bogus"),
        ({"audit": {"require_complete": 1.5}}, "audit.require_complete"),
        ({"audit": {"count": "received"}}, "audit.count"),
        ({"output": {"uri": "file://host/x"}}, "output.uri"),
        ({"output": {"uri": "hdfs://nn:8020/"}}, "output.uri"),
        ({"output": {"filesystem": "s3"}}, "output.filesystem"),
        ({"output": {"drop_decoded_values": "yes"}}, "output.drop_decoded_values"),
        ({"source": {"topics": []}}, "source.topics"),
        ({"source": {"topics": ["ok", "../etc"]}}, "source.topics"),
        ({"source": {"topics": ["a", "a"]}}, "source.topics"),
        ({"source": {"brokers": ["h:1"]}}, "source.zk"),
        ({"source": {"decode_agent_records": ["zzz"]}}, "source.decode_agent_records"),
        ({"spark": {"master": ""}}, "spark.master"),
    ],
)
def test_errors_name_the_key(sections, key):
    with pytest.raises(LoaderConfigError) as info:
        config_from_dict(minimal(**sections))
    assert key in str(info.value)


def test_missing_required_and_unknown_section():
    with pytest.raises(LoaderConfigError, match="output.uri: missing"):
        config_from_dict({"source": {"zk": "h:1/x", "topics": ["a"]}})
    with pytest.raises(LoaderConfigError, match="sink: unknown table"):
        config_from_dict(minimal() | {"sink": {}})


def test_broker_addresses_are_checked():
    data = minimal()
    del data["source"]["zk"]
    data["source"]["brokers"] = ["127.0.0.1"]
    with pytest.raises(LoaderConfigError, match=r"source\.brokers\[0\]: '127\.0\.0\.1' must look like host:port"):
        config_from_dict(data)


def test_file_errors(tmp_path):
    with pytest.raises(LoaderConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\n")
    with pytest.raises(LoaderConfigError, match="not valid TOML"):
        load_config(bad)
