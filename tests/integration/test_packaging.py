"""The wheel as a user gets it: built from this tree, installed into a fresh virtualenv.

Checks what only an installed wheel shows: ``logferry --version``, every command loads,
the example configs of ``etc/`` travel in the wheel and are what the demo reads (the
demo itself is not run here), and the optional dependencies are extras, not base
requirements. The throwaway venv has no network and no index: it installs the wheel
alone and borrows this venv's site-packages (msgpack, kazoo, ...) through a ``.pth``
line, so none of this venv's own ``.pth`` files (its editable install) take effect.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # about 5 s: builds, makes a venv, runs it

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "broker", "agent", "mirror", "hadoop_loader", "demo", "etc"]
OPTIONAL = {"pyspark", "pyarrow", "numpy", "watchdog"}
STEP_TIMEOUT = 240


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=STEP_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(python of a fresh venv holding only the wheel, the environment to run it in)."""
    work = tmp_path_factory.mktemp("packaging")
    # Build from a copy, so the build's own files (build/, *.egg-info) stay out of the tree.
    tree = work / "src"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(source, tree / name)
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(tree)], work)
    (wheel,) = dist.glob("logferry-*.whl")

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
          "--no-index", str(wheel)], work)
    fresh_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           work).stdout.strip())
    # After the fresh site-packages on sys.path: the wheel's packages win over this tree's.
    (fresh_site / "borrowed-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return python, env


def test_version_and_every_command_from_the_installed_wheel(installed):
    python, env = installed
    logferry = python.parent / "logferry"
    version = _run([str(logferry), "--version"], python.parent, env)
    assert version.stdout.strip() == "logferry 0.1.0"
    helped = _run([str(logferry), "--help"], python.parent, env)
    for command in ("broker", "topic", "produce", "consume", "zk", "group",
                    "agent", "mirror", "load", "demo"):
        assert f"    {command} " in helped.stdout, helped.stdout
    assert "unavailable" not in helped.stderr + helped.stdout, helped.stderr


def test_the_demo_reads_the_example_configs_carried_by_the_wheel(installed):
    python, env = installed
    probe = (
        "import json, demo, broker\n"
        "from pathlib import Path\n"
        "from demo import configs\n"
        "etc = configs.ETC\n"
        "print(json.dumps({\n"
        "  'demo': demo.__file__, 'broker': broker.__file__, 'etc': str(etc),\n"
        "  'files': sorted(str(p.relative_to(etc)) for p in etc.rglob('*') if p.is_file()),\n"
        "  'live': [str(p) for p in configs.broker_templates('live')],\n"
        "  'analysis': [str(p) for p in configs.broker_templates('analysis')],\n"
        "  'others': [str(f()) for f in (configs.agent_template, configs.mirror_template,\n"
        "                                configs.loader_template)],\n"
        "}))\n")
    found = json.loads(_run([str(python), "-c", probe], python.parent, env).stdout)
    site = python.parents[1]
    for key in ("demo", "broker", "etc"):
        assert Path(found[key]).is_relative_to(site), f"{key} came from {found[key]}, not the wheel"
    assert Path(found["etc"]).parent == Path(found["demo"]).parent
    ours = sorted(str(p.relative_to(ROOT / "etc")) for p in (ROOT / "etc").rglob("*") if p.is_file())
    assert found["files"] == ours, "the wheel's etc/ differs from the tree's: see package-data"
    assert len(found["live"]) >= 2 and len(found["analysis"]) >= 1
    for path in found["live"] + found["analysis"] + found["others"]:
        assert Path(path).is_file() and Path(path).is_relative_to(found["etc"]), path


def test_optional_dependencies_are_extras_not_requirements(installed):
    python, env = installed
    probe = "import importlib.metadata as m, json; print(json.dumps(m.requires('logferry')))"
    requires = json.loads(_run([str(python), "-c", probe], python.parent, env).stdout)
    base = {r.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()
            for r in requires if "extra ==" not in r}
    assert base == {"msgpack", "kazoo"}, requires
    for name in OPTIONAL:
        assert any(r.lower().startswith(name) and "extra ==" in r for r in requires), (name, requires)
