"""The ``logferry`` command's own face: ``--version``, and plugins that cannot load.

A plugin (a ``logferry.commands`` entry point) that fails to import must not vanish
from the command line: it is named on stderr with the reason and the fix (the extra to
install, read from this distribution's metadata), and its command stays listed and,
when run, fails with the same line (exit 1, the CLI's rule for failures).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from broker.cli import main as cli


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"logferry {cli.version()}"
    assert cli.version() == "0.1.0"


@pytest.mark.parametrize(
    "module, extra",
    [
        ("pyspark", "loader"),
        ("pyspark.sql.datasource", "loader"),
        ("pyarrow.parquet", "loader"),
        ("numpy", "loader"),
        ("watchdog.observers", "agent"),
        ("msgpack", None),  # a base requirement: no extra provides it
        ("no_such_module", None),
    ],
)
def test_the_extra_providing_a_module_comes_from_the_metadata(module: str, extra: str | None) -> None:
    assert cli.extra_providing(module) == extra


PLUGINS = {
    "needs_spark": 'raise ModuleNotFoundError("No module named \'pyspark\'", name="pyspark")\n',
    "needs_unknown": "import logferry_test_module_that_does_not_exist\n",
    "buggy": 'raise RuntimeError("plugin bug")\n',
    "fine": (
        "def register(sub):\n"
        "    p = sub.add_parser('fine', help='a working plugin')\n"
        "    p.set_defaults(func=lambda args: 0)\n"
    ),
    "late": (
        "def register(sub):\n"
        "    p = sub.add_parser('late', help='imports its extra only when run')\n"
        "    def run(args):\n"
        "        raise ModuleNotFoundError(\"No module named 'watchdog'\", name='watchdog')\n"
        "    p.set_defaults(func=run)\n"
    ),
}


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real entry points to real modules in tmp_path, in place of the installed ones."""
    for name, text in PLUGINS.items():
        (tmp_path / f"logferry_test_plugin_{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        EntryPoint(name=name, value=f"logferry_test_plugin_{name}:register", group="logferry.commands")
        for name in PLUGINS
    ]
    monkeypatch.setattr(cli, "plugin_entry_points", lambda: points)


def test_a_plugin_that_fails_to_import_is_reported_with_the_fix(plugins, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    captured = capsys.readouterr()
    warnings = captured.err.splitlines()
    assert len(warnings) == 3, captured.err
    spark, unknown, buggy = sorted(warnings, key=lambda w: ("spark" not in w, "unknown" not in w))
    assert spark.startswith("logferry: warning: command 'needs_spark' is unavailable")
    assert "No module named 'pyspark'" in spark and "pip install 'logferry[loader]'" in spark
    assert "logferry_test_module_that_does_not_exist" in unknown
    assert "pip install 'logferry[all]'" in unknown
    assert "RuntimeError: plugin bug" in buggy and "bug in the plugin or a broken install" in buggy
    # The commands stay listed (so a user finds them), next to the working ones.
    listed = {line.split()[0] for line in captured.out.splitlines() if line.startswith("    ")}
    assert {"needs_spark", "needs_unknown", "buggy", "fine", "late"} <= listed, captured.out


def test_running_an_unavailable_command_fails_with_the_same_line(plugins, capsys) -> None:
    assert cli.main(["needs_spark", "--config", "x.toml"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("logferry needs_spark: error: command 'needs_spark' is unavailable")
    assert "pip install 'logferry[loader]'" in err[-1]


def test_a_missing_extra_at_run_time_is_one_line_not_a_traceback(plugins, capsys) -> None:
    assert cli.main(["fine"]) == 0
    assert cli.main(["late"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("logferry late: error: command 'late' is unavailable")
    assert "pip install 'logferry[agent]'" in err[-1]
    assert not any("Traceback" in line for line in err)


def test_a_built_in_command_loads_no_plugin(plugins, capsys) -> None:
    """A broker or `topic` process neither reads entry points nor imports the plugins'
    command lines: the broken plugins above stay silent."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["topic", "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit):  # not a choice: the plugin was never loaded
        cli.build_parser("broker").parse_args(["needs_spark"])
    assert "invalid choice: 'needs_spark'" in capsys.readouterr().err


def test_a_plugin_command_loads_only_its_plugin(plugins, capsys) -> None:
    assert cli.main(["fine"]) == 0
    assert capsys.readouterr().err == ""  # the three broken plugins were not loaded
    parser = cli.build_parser("fine")
    assert parser.parse_args(["fine"]).command == "fine" and parser.parse_args(["topic", "list"]).command == "topic"
    with pytest.raises(SystemExit):
        parser.parse_args(["late"])


def test_version_is_printed_on_stdout(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("logferry ") and out.strip() == f"logferry {cli.version()}"
