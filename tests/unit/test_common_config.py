"""broker.common.config: the one way the broker, agent, mirror and loader read TOML."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from broker.common.config import (
    BOOL,
    NONEMPTY_STR,
    PORT,
    POSITIVE_INT,
    Check,
    Validator,
    config_error,
    dumps,
    either,
    expand_env,
    fields,
    format_error,
    one_of,
    read,
)
from broker.common.errors import ConfigError

TABLE = fields(
    ("name",),
    {"name": "every widget needs one"},
    name=NONEMPTY_STR,
    port=PORT,
    colour=one_of("red", "blue"),
    enabled=BOOL,
)


class WidgetError(Exception):
    """A component's own config error, built from (key, problem, file)."""

    def __init__(self, key: str, problem: str, file: str = ""):
        super().__init__(format_error(file, key, problem))
        self.key, self.problem, self.file = key, problem, file


def test_format_leaves_out_empty_parts():
    assert format_error("a.toml", "x.y", "bad") == "a.toml: x.y: bad"
    assert format_error("", "x.y", "bad") == "x.y: bad"
    assert format_error("a.toml", "", "no such config file") == "a.toml: no such config file"


def test_default_error_is_the_brokers_config_error_with_key_and_file():
    error = config_error("log.flush_ms", "must be a positive integer, got 0", "b.toml")
    assert isinstance(error, ConfigError)
    assert (error.key, error.file) == ("log.flush_ms", "b.toml")
    assert str(error) == "b.toml: log.flush_ms: must be a positive integer, got 0"


@pytest.mark.parametrize(
    "table, key, problem",
    [
        ({"name": "w", "colur": "red"}, "w.colur", "unknown key (did you mean 'colour'?)"),
        ({"name": "w", "zzz": 1}, "w.zzz", "unknown key (known: colour, enabled, name, port)"),
        ({"name": "w", "port": 70000}, "w.port", "must be a port number 0-65535, got 70000"),
        ({"name": ""}, "w.name", "must be a non-empty string, got ''"),
        ({"name": "w", "enabled": 1}, "w.enabled", "must be true or false, got 1"),
        ({"name": "w", "colour": "green"}, "w.colour", "must be 'red' or 'blue', got 'green'"),
        ({}, "w.name", "missing (every widget needs one)"),
    ],
)
def test_check_names_file_and_key(table, key, problem):
    validator = Validator(file="w.toml", error=WidgetError)
    with pytest.raises(WidgetError) as info:
        validator.check(table, TABLE, "w")
    assert (info.value.key, info.value.problem, info.value.file) == (key, problem, "w.toml")
    assert str(info.value) == f"w.toml: {key}: {problem}"


def test_check_returns_a_copy_without_defaults():
    table = {"name": "w", "port": 0}
    checked = Validator().check(table, TABLE)
    assert checked == table and checked is not table


def test_one_of_and_either_tell_types_apart():
    assert not one_of(1, "all").test(True) and one_of(1, "all").test(1)
    both = either(POSITIVE_INT, Check(lambda v: v == "auto", "'auto'"))
    assert both.test(3) and both.test("auto") and not both.test(0)
    assert both.expected == "a positive integer or 'auto'"


def test_fields_refuse_a_required_key_without_a_check():
    with pytest.raises(ValueError):
        fields(("nme",), name=NONEMPTY_STR)


def test_tables_absent_required_wrong_type_and_unknown():
    validator = Validator(file="c.toml")
    assert validator.table({}, "extra", fields(port=PORT)) == {}
    with pytest.raises(ConfigError, match=r"^c\.toml: w\.name: missing"):
        validator.table({}, "w", TABLE)  # absent table, required key inside
    with pytest.raises(ConfigError, match=r"^c\.toml: w: missing \(the \[w\] table is required\)"):
        validator.table({}, "w", TABLE, required=True)
    with pytest.raises(ConfigError, match=r"^c\.toml: w: must be a table \(\[w\]\), got 3"):
        validator.table({"w": 3}, "w", TABLE)
    with pytest.raises(ConfigError, match=r"^c\.toml: wdget: unknown table \(did you mean 'widget'\?\)"):
        validator.sections({"wdget": {}}, {"widget": TABLE})
    assert validator.sections({"widget": {"name": "x"}}, {"widget": TABLE, "more": {}}) == {
        "widget": {"name": "x"},
        "more": {},
    }


def test_relative_paths_start_at_the_config_files_directory(tmp_path, monkeypatch):
    config = tmp_path / "etc" / "c.toml"
    config.parent.mkdir()
    config.write_text('dir = "data"\n')
    monkeypatch.chdir(tmp_path)
    _, validator = read(Path("etc") / "c.toml")
    assert validator.file == "etc/c.toml"
    assert validator.path("data") == tmp_path / "etc" / "data"
    assert validator.path("../x") == tmp_path / "etc" / ".." / "x"
    assert validator.path("/abs/x") == Path("/abs/x")
    assert validator.path("~/x") == Path.home() / "x"
    assert Validator().path("data") == tmp_path / "data"  # a dict: the working directory


def test_read_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.toml: no such config file$"):
        read(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        read(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[x\n")
    with pytest.raises(WidgetError, match=r"bad\.toml: not valid TOML: "):
        read(bad, WidgetError)


# -- ${VAR} from the environment ----------------------------------------------------------------

ENV = {"ZK": "zk1:2181", "EMPTY": "", "ODD": 'a"b\nc ${NOT_AGAIN}'}


@pytest.mark.parametrize(
    "value, expanded",
    [
        ("${ZK}/logferry/live", "zk1:2181/logferry/live"),
        ("${ZK:-x}", "zk1:2181"),
        ("${MISSING:-127.0.0.1:2181}", "127.0.0.1:2181"),
        ("${EMPTY:-fallback}", "fallback"),  # as the shell: empty takes the default too
        ("${EMPTY}", ""),
        ("${MISSING:-}", ""),
        ("${MISSING:-a:-b}", "a:-b"),
        ("${ZK}${ZK}", "zk1:2181zk1:2181"),
        ("cost $$5 and $${ZK}", "cost $5 and ${ZK}"),  # $$ is a literal $, never expanded
        (r"^\d+ [A-Z]+$", r"^\d+ [A-Z]+$"),  # a regex's lone $ stays
        ("$ZK", "$ZK"),  # only the braced form is a reference
        ("${ODD}", 'a"b\nc ${NOT_AGAIN}'),  # a value is taken as it is, once
        ("no references", "no references"),
    ],
)
def test_expand_env_in_a_string(value, expanded):
    assert expand_env({"k": value}, ENV) == {"k": expanded}


def test_expand_env_walks_tables_lists_and_arrays_of_tables_and_keeps_other_types():
    doc = {
        "n": 3,
        "ok": True,
        "ratio": 0.5,
        "t": {"${ZK}": "${ZK}", "inner": {"v": ["${ZK}", 1]}},
        "sources": [{"pattern": "/var/log/${MISSING:-app}/*.log"}],
    }
    assert expand_env(doc, ENV) == {
        "n": 3,
        "ok": True,
        "ratio": 0.5,
        "t": {"${ZK}": "zk1:2181", "inner": {"v": ["zk1:2181", 1]}},  # keys are not expanded
        "sources": [{"pattern": "/var/log/app/*.log"}],
    }
    assert doc["t"]["inner"]["v"][0] == "${ZK}", "the input is not changed"


@pytest.mark.parametrize(
    "doc, key, problem",
    [
        (
            {"cluster": {"zk": "${LIVE_ZK}/logferry/live"}},
            "cluster.zk",
            "environment variable LIVE_ZK is not set (set it, or give a default: ${LIVE_ZK:-value})",
        ),
        (
            {"sources": [{"topic": "a"}, {"topic": "${TOPIC}"}]},
            "sources[1].topic",
            "environment variable TOPIC is not set",
        ),
        ({"top": ["x", "${NOPE}"]}, "top[1]", "NOPE is not set"),
        ({"a": {"b": "${1BAD}"}}, "a.b", "'${1BAD}' is not '${NAME}' or '${NAME:-default}'"),
        ({"a": {"b": "${ZK:default}"}}, "a.b", "'${ZK:default}' is not"),
        ({"a": {"b": "${}"}}, "a.b", "'${}' is not"),
        ({"a": {"b": "x ${ZK"}}, "a.b", "'${' without a closing '}' (write '$$' for a literal '$')"),
    ],
)
def test_expand_env_errors_name_the_key_and_the_variable(doc, key, problem):
    with pytest.raises(WidgetError) as info:
        expand_env(doc, ENV, "w.toml", WidgetError)
    assert (info.value.key, info.value.file) == (key, "w.toml")
    assert problem in info.value.problem


def test_read_expands_the_environment_after_parsing(tmp_path, monkeypatch):
    path = tmp_path / "w.toml"
    path.write_text('[t]\nzk = "${ZK_TEST_VAR}/c"\nport = 1\n')
    assert read(path, env={"ZK_TEST_VAR": 'h:1"\n'})[0] == {"t": {"zk": 'h:1"\n/c', "port": 1}}
    monkeypatch.setenv("ZK_TEST_VAR", "from-os")
    assert read(path)[0]["t"]["zk"] == "from-os/c"
    monkeypatch.delenv("ZK_TEST_VAR")
    with pytest.raises(ConfigError) as info:
        read(path)
    assert str(info.value) == (
        f"{path}: t.zk: environment variable ZK_TEST_VAR is not set "
        "(set it, or give a default: ${ZK_TEST_VAR:-value})"
    )


def test_dumps_round_trips_tables_arrays_of_tables_and_quoted_keys():
    doc = {
        "state_dir": "/s",
        "n": 3,
        "ok": True,
        "ratio": 0.5,
        "list": ["a", 'b"q'],
        "producer": {"acks": "all"},
        "spark": {"conf": {"spark.sql.x": "16"}},
        "sources": [{"pattern": r"^\d+ x", "multiline": {"start": "^x"}}, {"pattern": "/b"}],
    }
    assert tomllib.loads(dumps(doc)) == doc
    assert tomllib.loads(dumps({"t": {"v": (1, 2)}})) == {"t": {"v": [1, 2]}}


def _component_loaders():
    from agent.config import load_config as agent
    from broker.server.config import load_broker_config as broker
    from hadoop_loader.config import load_config as loader
    from mirror.config import load_config as mirror

    return [
        (
            "broker",
            broker,
            {"broker": {"id": 1, "log_dirs": ["d"], "zk_connect": "h:1/c", "metrics_prot": 1}},
            "broker.metrics_prot",
            "metrics_port",
        ),
        (
            "agent",
            agent,
            {
                "state_dir": "s",
                "cluster": {"zk": "h:1/c"},
                "sources": [{"pattern": "/a", "topic": "t", "multline": {}}],
            },
            "sources[0].multline",
            "multiline",
        ),
        (
            "mirror",
            mirror,
            {
                "source": {"zk_connect": "h:1/a"},
                "target": {"zk_connect": "h:1/b"},
                "mirror": {"topics": ["a"], "on_gaps": "stop"},
            },
            "mirror.on_gaps",
            "on_gap",
        ),
        (
            "loader",
            loader,
            {"source": {"zk": "h:1/a", "topics": ["a"]}, "output": {"uri": "out", "compresion": "zstd"}},
            "output.compresion",
            "compression",
        ),
    ]


@pytest.mark.parametrize(
    "name, load, doc, key, meant", _component_loaders(), ids=["broker", "agent", "mirror", "loader"]
)
def test_every_component_reports_a_typo_in_the_one_format(tmp_path, name, load, doc, key, meant):
    path = tmp_path / f"{name}.toml"
    path.write_text(dumps(doc))
    with pytest.raises(Exception) as info:
        load(path)
    assert str(info.value) == f"{path}: {key}: unknown key (did you mean {meant!r}?)"
    assert (info.value.key, info.value.file) == (key, str(path))


def test_every_component_takes_relative_paths_from_the_config_file(tmp_path, monkeypatch):
    from agent.config import load_config as agent
    from broker.server.config import load_broker_config as broker
    from hadoop_loader.config import load_config as loader
    from mirror.config import load_config as mirror

    (tmp_path / "etc").mkdir()
    monkeypatch.chdir(tmp_path / "etc")  # anywhere but the files' directory would do
    conf = tmp_path / "conf"
    conf.mkdir()
    files = {name: conf / f"{name}.toml" for name in ("broker", "agent", "mirror", "loader")}
    files["broker"].write_text(dumps({"broker": {"id": 1, "log_dirs": ["data"], "zk_connect": "h:1/c"}}))
    files["agent"].write_text(
        dumps({"state_dir": "state", "cluster": {"zk": "h:1/c"}, "sources": [{"pattern": "/a", "topic": "t"}]})
    )
    files["mirror"].write_text(
        dumps(
            {
                "source": {"zk_connect": "h:1/a"},
                "target": {"zk_connect": "h:1/b"},
                "mirror": {"topics": ["a"]},
                "metrics": {"status_file": "status.json"},
            }
        )
    )
    files["loader"].write_text(dumps({"source": {"zk": "h:1/a", "topics": ["a"]}, "output": {"uri": "warehouse"}}))
    assert broker(files["broker"]).log_dirs == (conf / "data",)
    assert agent(files["agent"]).state_dir == conf / "state"
    assert mirror(files["mirror"]).status_file == str(conf / "status.json")
    assert loader(files["loader"]).output.uri == (conf / "warehouse").resolve().as_uri()


def _env_configs():
    """Per component: a config using ${VAR} and ${VAR:-default}, what to look at, its values."""
    return [
        (
            "broker",
            {
                "broker": {
                    "id": 1,
                    "log_dirs": ["${LF_DATA:-data}"],
                    "zk_connect": "${LF_ZK}/logferry/live",
                    "host": "${LF_HOST}",
                }
            },
            lambda c: (c.zk_connect, c.host, c.log_dirs),
            lambda conf: ("zk9:2181/logferry/live", "10.0.0.7", (conf / "data",)),
        ),
        (
            "agent",
            {
                "state_dir": "${LF_DATA:-state}",
                "host": "${LF_HOST}",
                "cluster": {"zk": "${LF_ZK}/logferry/live"},
                "sources": [{"pattern": "/var/log/${LF_APP:-app}/*.log", "topic": "t"}],
            },
            lambda c: (c.zk, c.host, c.state_dir, c.sources[0].patterns),
            lambda conf: ("zk9:2181/logferry/live", "10.0.0.7", conf / "state", ("/var/log/app/*.log",)),
        ),
        (
            "mirror",
            {
                "source": {"zk_connect": "${LF_ZK}/logferry/live"},
                "target": {"zk_connect": "${LF_TARGET_ZK:-zk0:2181}/logferry/analysis"},
                "mirror": {"topics": ["a"]},
            },
            lambda c: (c.source_zk, c.target_zk),
            lambda conf: ("zk9:2181/logferry/live", "zk0:2181/logferry/analysis"),
        ),
        (
            "loader",
            {
                "source": {"zk": "${LF_ZK}/logferry/analysis", "topics": ["a"]},
                "output": {"uri": "${LF_DATA:-warehouse}"},
            },
            lambda c: (c.source.zk, c.output.uri),
            lambda conf: ("zk9:2181/logferry/analysis", (conf / "warehouse").resolve().as_uri()),
        ),
    ]


def _loader_of(name):
    from agent.config import load_config as agent
    from broker.server.config import load_broker_config as broker
    from hadoop_loader.config import load_config as loader
    from mirror.config import load_config as mirror

    return {"broker": broker, "agent": agent, "mirror": mirror, "loader": loader}[name]


@pytest.mark.parametrize("name, doc, loaded, expected", _env_configs(), ids=["broker", "agent", "mirror", "loader"])
def test_every_component_takes_variables_from_the_environment(tmp_path, monkeypatch, name, doc, loaded, expected):
    monkeypatch.setenv("LF_ZK", "zk9:2181")
    monkeypatch.setenv("LF_HOST", "10.0.0.7")
    for unset in ("LF_DATA", "LF_APP", "LF_TARGET_ZK"):
        monkeypatch.delenv(unset, raising=False)
    path = tmp_path / f"{name}.toml"
    path.write_text(dumps(doc))
    assert loaded(_loader_of(name)(path)) == expected(tmp_path)
    monkeypatch.delenv("LF_ZK")
    with pytest.raises(Exception) as info:
        _loader_of(name)(path)
    assert "environment variable LF_ZK is not set" in str(info.value)
    zk_key = {
        "broker": "broker.zk_connect",
        "agent": "cluster.zk",
        "mirror": "source.zk_connect",
        "loader": "source.zk",
    }[name]
    assert (info.value.file, info.value.key) == (str(path), zk_key)
