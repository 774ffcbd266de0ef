"""The local HDFS's decisions without Java: versions in step, config files, JMX, bad input.

The servers themselves run in tests/integration/test_hdfs_cmd.py and the loader's
tests/loader/test_hdfs_integration.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from broker.cli import hdfs_cmd
from broker.testing import hdfs
from broker.testing.hdfs import LocalHdfs, parse_jmx, read_site_xml, render_site_xml
from broker.testing.jars import REPO
from tests.support.cli import logferry
from tests.support.ports import free_port


def test_hadoop_version_is_the_poms_and_speaks_to_pysparks_client():
    """The pom resolves the servers' version, and the Hadoop client inside pyspark is the
    one the servers were checked with (:data:`hdfs.CLIENT_VERSIONS`): a pyspark with
    another client must be run against them (tests/loader/test_hdfs_integration.py) first."""
    pom = (REPO / "scripts" / "jars" / "apache-hadoop" / "pom.xml").read_text()
    assert re.search(r"<hadoop.version>(.+)</hadoop.version>", pom).group(1) == hdfs.HADOOP_VERSION
    assert hdfs.pyspark_hadoop_version() in hdfs.CLIENT_VERSIONS


def test_site_xml_round_trips_and_escapes(tmp_path: Path):
    path = tmp_path / "core-site.xml"
    path.write_text(render_site_xml({"fs.defaultFS": "hdfs://127.0.0.1:1", "odd": "a<b&c"}))
    assert read_site_xml(path) == {"fs.defaultFS": "hdfs://127.0.0.1:1", "odd": "a<b&c"}
    assert read_site_xml(tmp_path / "missing.xml") == {}
    (tmp_path / "bad.xml").write_text("<configuration><property>")
    assert read_site_xml(tmp_path / "bad.xml") == {}


def test_config_binds_loopback_and_a_handle_finds_its_ports(tmp_path: Path):
    server = LocalHdfs(tmp_path / "h", 41001, 41002)
    server.write_config()
    site = read_site_xml(server.conf_dir / "hdfs-site.xml")
    assert site["dfs.namenode.http-address"] == "127.0.0.1:41002"
    assert all(site[k] == "127.0.0.1:0" for k in ("dfs.datanode.address", "dfs.datanode.ipc.address"))
    assert site["dfs.namenode.name.dir"] == (server.data_dir / "name").as_uri()
    assert all((server.conf_dir / "webapps" / w).is_dir() for w in hdfs.WEBAPPS)
    again = LocalHdfs.from_data_dir(tmp_path / "h")
    assert (again.uri, again.http_port) == ("hdfs://127.0.0.1:41001", 41002)
    assert not again.is_running() and again.pids() == {"namenode": None, "datanode": None}


def test_parse_jmx_merges_beans():
    text = json.dumps({"beans": [{"NumLiveDataNodes": 1}, {"Safemode": "", "Version": "3.5.0, r1"}]})
    assert parse_jmx(text) == {"NumLiveDataNodes": 1, "Safemode": "", "Version": "3.5.0, r1"}
    ready = hdfs.HdfsState(1, "", "3.5.0", 0, 0, 1)
    assert ready.ready and not hdfs.HdfsState(1, "Safe mode is ON.", "3.5.0", 0, 0, 1).ready
    assert not hdfs.HdfsState(0, "", "3.5.0", 0, 0, 1).ready


def test_no_jars_is_one_line_and_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOGFERRY_BENCH_CACHE", str(tmp_path / "empty-cache"))
    result = logferry("hdfs", "start", "--data-dir", str(tmp_path / "h"), "--port", str(free_port()))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logferry hdfs start: error: no Apache Hadoop 3.5.0 jars")
    assert "make hadoop-jars" in lines[0]
    assert not (tmp_path / "h" / "namenode.pid").exists()


def test_no_java_is_one_line_and_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if not hdfs.JARS.resolved():
        pytest.skip(hdfs.JARS.missing_reason())
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    monkeypatch.delenv("JAVA_HOME", raising=False)
    result = logferry("hdfs", "start", "--data-dir", str(tmp_path / "h"), "--port", str(free_port()))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "logferry hdfs start: error: no Java runtime found (no `java` on PATH, JAVA_HOME unset or empty); "
        + hdfs.JAVA_HINT
    ]


def test_status_and_stop_of_nothing(tmp_path: Path):
    status = logferry("hdfs", "status", "--data-dir", str(tmp_path / "h"))
    assert status.returncode == hdfs_cmd.EXIT_NOT_RUNNING and "HDFS: not running" in status.stdout
    stop = logferry("hdfs", "stop", "--data-dir", str(tmp_path / "h"))
    assert stop.returncode == 0 and "HDFS is not running" in stop.stdout


def test_bad_port_is_a_usage_error(tmp_path: Path):
    result = logferry("hdfs", "start", "--data-dir", str(tmp_path / "h"), "--port", "70000")
    assert result.returncode == 2 and "out of range" in result.stderr
