"""The wheel as a user gets it: built from this tree, installed into fresh virtualenvs.

Checks what only an installed wheel shows: ``logferry --version``, every command loads,
the example configs of ``etc/`` travel in the wheel and are what the demo reads (the
demo itself is not run here), and the optional dependencies are extras, not base
requirements. The throwaway venvs use no network and no index: each installs the wheel
alone and borrows dependencies through a ``.pth`` line (so none of this venv's own
``.pth`` files, its editable install, take effect): the "full" venv borrows this
venv's whole site-packages; the "base" venv only copies of the base requirements
(:data:`BASE`), which is what ``pip install logferry`` gives.
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
NOT_SOURCES = (
    ".git",
    ".venv",
    ".logferry",
    "__pycache__",
    "*.pyc",
    ".*_cache",
    "build",
    "dist",
    "*.egg-info",
    "spark-warehouse",
    "metastore_db",
    "results",
    ".cache",  # benchmarks/.cache: Apache Kafka's jars (make kafka-jars), some 50 MB
)
BASE = {
    "msgpack": "msgpack",
    "kazoo": "kazoo",
    "prometheus-client": "prometheus_client",
    "tomli-w": "tomli_w",
    "zstandard": "zstandard",
    "lz4": "lz4",
    "scramp": "scramp",
    "isal": "isal",
}
"""The base requirements (distribution: import name). A new one is a decision: every
machine that runs any part of logferry downloads it. (scramp: SASL SCRAM on every
client and broker; pure Python, with asn1crypto. isal: ISA-L's CRC-32, a 0.3 MB wheel,
about 10x zlib's on every batch a producer encodes and a broker checks.)"""
BASE_TRANSITIVE = ("asn1crypto",)
"""Import names the base requirements themselves need."""
OPTIONAL = {"pyspark", "pyarrow", "numpy", "watchdog", "cryptography", "kio", "crc32c", "cramjam"}
STEP_TIMEOUT = 240


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree."""
    work = tmp_path_factory.mktemp("packaging")
    # Build from a copy, so the build's own files (build/, *.egg-info) stay out of the tree.
    tree = work / "src"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(tree)], work)
    (built,) = dist.glob("logferry-*.whl")
    return built


def _venv_with(wheel: Path, work: Path, borrowed: Path) -> tuple[Path, dict[str, str]]:
    """(python of a fresh venv holding only ``wheel`` and ``borrowed``'s packages, its env)."""
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    python = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        work,
    )
    fresh_site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work).stdout.strip()
    )
    # After the fresh site-packages on sys.path: the wheel's packages win over this tree's.
    (fresh_site / "borrowed-dependencies.pth").write_text(f"{borrowed}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return python, env


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A venv with the wheel and every extra's dependencies (this venv's)."""
    return _venv_with(wheel, tmp_path_factory.mktemp("full"), Path(sysconfig.get_path("purelib")))


@pytest.fixture(scope="module")
def base_installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A venv with the wheel and its base requirements only (:data:`BASE`)."""
    work = tmp_path_factory.mktemp("base")
    deps = work / "base-deps"
    deps.mkdir()
    site = Path(sysconfig.get_path("purelib"))
    for package in (*BASE.values(), *BASE_TRANSITIVE):
        shutil.copytree(site / package, deps / package, ignore=shutil.ignore_patterns("__pycache__"))
        for info in site.glob(f"{package}-*.dist-info"):  # what importlib.metadata reads
            shutil.copytree(info, deps / info.name)
    return _venv_with(wheel, work, deps)


def test_version_and_every_command_from_the_installed_wheel(installed):
    python, env = installed
    logferry = python.parent / "logferry"
    version = _run([str(logferry), "--version"], python.parent, env)
    assert version.stdout.strip() == "logferry 0.1.0"
    helped = _run([str(logferry), "--help"], python.parent, env)
    for command in ("broker", "topic", "produce", "consume", "zk", "group", "agent", "mirror", "load", "demo"):
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
        "}))\n"
    )
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
    base = {
        r.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()
        for r in requires
        if "extra ==" not in r
    }
    assert base == set(BASE), requires
    for name in OPTIONAL:
        assert any(r.lower().startswith(name) and "extra ==" in r for r in requires), (name, requires)


def test_the_base_install_is_broker_client_and_cli_without_spark(base_installed):
    python, env = base_installed
    absent = _run(
        [str(python), "-c", f"import importlib.util as u; print([m for m in {sorted(OPTIONAL)!r} if u.find_spec(m)])"],
        python.parent,
        env,
    )
    assert absent.stdout.strip() == "[]", "the base venv must not see the optional packages"
    _run(
        [
            str(python),
            "-c",
            "import broker.client, broker.server.broker, broker.cli.main, broker.testing.zkserver, mirror.core",
        ],
        python.parent,
        env,
    )
    logferry = python.parent / "logferry"
    assert _run([str(logferry), "--version"], python.parent, env).stdout.strip() == "logferry 0.1.0"
    helped = _run([str(logferry), "--help"], python.parent, env)
    for command in ("broker", "topic", "produce", "consume", "zk", "group", "mirror"):
        assert f"    {command} " in helped.stdout, helped.stdout
    # A command whose extra is missing is not silently gone: it is named with the fix,
    # at load (here) or when run.
    for line in helped.stderr.splitlines():
        assert line.startswith("logferry: warning: command '") and "pip install 'logferry[" in line, line
    run = subprocess.run(
        [str(logferry), "load", "--config", "loader.toml"],
        cwd=python.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pip install 'logferry[loader]'" in run.stderr.splitlines()[-1], run.stderr
    assert "Traceback" not in run.stderr
    certs = subprocess.run(
        [str(logferry), "certs", "ca", "--out", str(python.parents[1] / "ca")],
        cwd=python.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert certs.returncode == 1 and "pip install 'logferry[certs]'" in certs.stderr, certs.stderr
    assert "Traceback" not in certs.stderr and not (python.parents[1] / "ca").exists()
    demo = subprocess.run(
        [str(logferry), "demo", "--workdir", str(python.parents[1] / "demo")],
        cwd=python.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert demo.returncode == 1 and demo.stdout == "", demo.stdout + demo.stderr
    assert demo.stderr.strip().endswith("pip install 'logferry[all]'"), demo.stderr
    assert not (python.parents[1] / "demo").exists(), "the demo started before checking its extras"
