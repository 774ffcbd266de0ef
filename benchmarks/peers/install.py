"""Install what the experiment needs: Debian packages for the peers, Python clients.

Why here and not in the project's dependencies: the peers and their clients are only
needed to compare against, never to run logferry. The Python requirements are read from
the ``bench`` extra of pyproject.toml, so their version ranges live in one place.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from peers.base import PeerUnavailable

REPO = Path(__file__).resolve().parents[2]

# import name of each distribution of the bench extra
IMPORT_NAMES = {"pika": "pika", "stomp.py": "stomp", "matplotlib": "matplotlib", "nats-py": "nats", "redis": "redis"}

APT_TIMEOUT = 900.0
PIP_TIMEOUT = 600.0


def bench_requirements() -> list[str]:
    """The requirement strings of pyproject.toml's ``bench`` extra."""
    with open(REPO / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    return list(project["optional-dependencies"]["bench"])


def _dist_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if ch in "<>=!~[; ":
            return requirement[:i]
    return requirement


def ensure_python_module(dist: str) -> None:
    """Import-check the bench requirement ``dist``; pip-install it (with its range from
    pyproject.toml) into this interpreter when missing. Raises PeerUnavailable."""
    module = IMPORT_NAMES.get(dist, dist)
    if importlib.util.find_spec(module) is not None:
        return
    spec = next((r for r in bench_requirements() if _dist_name(r) == dist), dist)
    print(f"[install] pip install {spec!r} into {sys.prefix}", flush=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", spec],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(f"pip install {spec} took more than {PIP_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise PeerUnavailable(
            f"pip install {spec} failed:\n{tail}\nInstall it yourself: {sys.executable} -m pip install '{spec}'"
        )
    importlib.invalidate_caches()
    if importlib.util.find_spec(module) is None:
        raise PeerUnavailable(f"{spec} installed but '{module}' still cannot be imported")


def ensure_apt_package(package: str, probe: Path) -> None:
    """Make sure Debian package ``package`` is installed (``probe`` is a file it ships).

    Installs it with apt-get when missing and running as root; otherwise raises
    PeerUnavailable with the command to run. The packages' maintainer scripts may start
    a system service on hosts with an init system: the benchmark never uses it (private
    ports and data directories) and leaves it alone.
    """
    if probe.exists():
        return
    command = f"apt-get install -y --no-install-recommends {package}"
    if shutil.which("apt-get") is None:
        raise PeerUnavailable(
            f"{package} is not installed and this is not a Debian-like system (no apt-get); install {package} by hand"
        )
    if os.geteuid() != 0:
        raise PeerUnavailable(
            f"{package} is not installed and installing it needs root: "
            f"run 'sudo {command}' (or scripts/install-bench-deps.sh as root)"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for attempt in ("install", "update+install"):
        if attempt == "update+install":
            print("[install] apt-get update (the package index may be stale)", flush=True)
            _run(["apt-get", "update"], env, package)
        print(f"[install] {command}", flush=True)
        done = _run(command.split(), env, package)
        if done.returncode == 0 and probe.exists():
            return
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
    raise PeerUnavailable(f"could not install {package} ({command} exited {done.returncode}):\n{tail}")


def _run(argv: list[str], env: dict[str, str], package: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(f"installing {package}: '{' '.join(argv)}' took more than {APT_TIMEOUT:.0f} s") from None
