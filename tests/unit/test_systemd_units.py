"""The systemd units of etc/systemd/ run real commands on the example configs of etc/.

A unit names installed paths (docs/deployment.md#installed-paths-and-systemd-units):
the virtualenv's ``/opt/logferry/venv/bin/logferry`` and ``/etc/logferry/<file>``, a copy of
``etc/<file>`` (``/etc/logferry/broker-<id>.toml`` of ``etc/<datacenter>/broker-<id>.toml``).
These tests parse each unit and check that its ExecStart is a ``logferry`` command line
the CLI accepts, that the config it names is shipped and loads, and that the ZooKeeper
unit runs the same server, jars and settings as ``logferry zk start``.
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest

from agent.config import load_config as load_agent_config
from broker.cli.main import build_parser
from broker.server.config import load_broker_config
from broker.testing.zkserver import DEBIAN_JAVA_DIR, MAIN_CLASS, ZOOKEEPER_JARS, read_cfg
from hadoop_loader.config import load_config as load_loader_config
from mirror.config import load_config as load_mirror_config

ROOT = Path(__file__).resolve().parents[2]
ETC = ROOT / "etc"
SYSTEMD = ETC / "systemd"
UNITS = sorted(SYSTEMD.glob("*"))
SERVICES = [u for u in UNITS if u.suffix == ".service"]
LOGFERRY_SERVICES = [u for u in SERVICES if u.name != "logferry-zookeeper.service"]

INSTALLED_CONFIG_DIR = "/etc/logferry/"
LOGFERRY = "/opt/logferry/venv/bin/logferry"
LOADERS = {
    "broker": load_broker_config,
    "agent": load_agent_config,
    "mirror": load_mirror_config,
    "load": load_loader_config,
}
BROKER_IDS = sorted(
    int(m.group(1)) for p in ETC.glob("*/broker-*.toml") if (m := re.fullmatch(r"broker-(\d+)\.toml", p.name))
)


def parse_unit(path: Path) -> configparser.ConfigParser:
    """A unit file as INI (strict: a key given twice fails, as the units here avoid it)."""
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(path.read_text(), source=str(path))
    return unit


def shipped_example(installed: str) -> list[Path]:
    """The files of etc/ an installed config path is a copy of (empty: none)."""
    assert installed.startswith(INSTALLED_CONFIG_DIR), installed
    name = installed.removeprefix(INSTALLED_CONFIG_DIR)
    if re.fullmatch(r"broker-\d+\.toml", name):
        return sorted(ETC.glob(f"*/{name}"))
    return [ETC / name] if (ETC / name).is_file() else []


def instances(path: Path) -> list[str]:
    """The instance names to try a unit with: the broker ids for the template."""
    return [str(i) for i in BROKER_IDS] if path.name.endswith("@.service") else [""]


def test_the_documented_units_are_there():
    assert {u.name for u in UNITS} == {
        "logferry-zookeeper.service",
        "logferry-broker@.service",
        "logferry-agent.service",
        "logferry-mirror.service",
        "logferry-load.service",
        "logferry-load.timer",
        "logferry-load-continuous.service",
    }
    assert BROKER_IDS


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_unit_parses_and_is_installable(path):
    unit = parse_unit(path)
    assert unit["Unit"]["Description"]
    if path.suffix == ".service":
        service = unit["Service"]
        assert service["ExecStart"] and service["User"] and service["Group"]
        if service.get("Type") == "oneshot":
            assert "Install" not in unit, "a oneshot run by a timer is not enabled itself"
        else:
            assert unit["Install"]["WantedBy"] == "multi-user.target"
            assert service["Restart"] in ("on-failure", "always")
            if path in LOGFERRY_SERVICES:  # a config or usage error (exit 2) is not retried
                assert service["RestartPreventExitStatus"] == "2"


@pytest.mark.parametrize("path", LOGFERRY_SERVICES, ids=lambda p: p.name)
def test_service_runs_a_logferry_command_on_a_shipped_config(path):
    exec_start = parse_unit(path)["Service"]["ExecStart"]
    for instance in instances(path):
        argv = shlex.split(exec_start.replace("%i", instance))
        assert argv[0] == LOGFERRY
        args = build_parser().parse_args(argv[1:])  # an unknown command or option exits
        assert args.command in LOADERS, f"{path.name}: not a long-running command: {argv}"
        assert hasattr(args, "config"), f"{path.name}: `logferry {args.command}` is unavailable"
        examples = shipped_example(args.config)
        assert examples, f"{path.name}: {args.config} is no copy of a file in etc/"
        for example in examples:
            config = LOADERS[args.command](example)
            if args.command == "broker":
                assert config.broker_id == int(instance), f"{example} is not broker {instance}"


def test_agent_unit_reloads_with_sighup():
    """`systemctl reload logferry-agent` re-reads the sources (docs/agent.md)."""
    service = parse_unit(SYSTEMD / "logferry-agent.service")["Service"]
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_zookeeper_unit_runs_what_zk_start_runs_on_the_shipped_zoo_cfg():
    unit = parse_unit(SYSTEMD / "logferry-zookeeper.service")
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert Path(argv[0]).name == "java"
    classpath = argv[argv.index("-cp") + 1].split(":")
    assert classpath == [str(DEBIAN_JAVA_DIR / jar) for jar in ZOOKEEPER_JARS]
    assert argv[-2:] == [MAIN_CLASS, "/etc/logferry/zookeeper/zoo.cfg"]
    assert shipped_example(argv[-1]) == [ETC / "zookeeper" / "zoo.cfg"]
    (log4j,) = [a.removeprefix("-Dlog4j.configuration=file:") for a in argv if a.startswith("-Dlog4j.configuration=")]
    assert shipped_example(log4j) == [ETC / "zookeeper" / "log4j.properties"]
    # the state directory systemd creates for the server's user is zoo.cfg's dataDir
    data_dir = read_cfg(ETC / "zookeeper" / "zoo.cfg")["dataDir"]
    assert data_dir == "/var/lib/" + unit["Service"]["StateDirectory"]


def test_zookeeper_logs_to_the_journal():
    settings = read_cfg(ETC / "zookeeper" / "log4j.properties")
    appender = settings["log4j.rootLogger"].split(",")[1].strip()
    assert settings[f"log4j.appender.{appender}"] == "org.apache.log4j.ConsoleAppender"


def test_timer_starts_the_nightly_load_when_cron_would():
    timer = parse_unit(SYSTEMD / "logferry-load.timer")
    assert timer["Install"]["WantedBy"] == "timers.target"
    service = SYSTEMD / timer["Timer"]["Unit"]
    assert service.is_file() and parse_unit(service)["Service"]["Type"] == "oneshot"
    hour, minute = re.fullmatch(r"\*-\*-\* (\d\d):(\d\d):00", timer["Timer"]["OnCalendar"]).groups()
    (cron,) = [line.split() for line in (ETC / "cron" / "logferry-load").read_text().splitlines() if line[:1].isdigit()]
    assert (int(minute), int(hour)) == (int(cron[0]), int(cron[1]))
    # and the same command line
    load = shlex.split(parse_unit(service)["Service"]["ExecStart"])
    assert " ".join(load) in " ".join(cron)


def test_deployment_docs_point_at_every_unit():
    docs = (ROOT / "docs" / "deployment.md").read_text()
    for unit in UNITS:
        assert f"etc/systemd/{unit.name}" in docs, f"docs/deployment.md does not name {unit.name}"
