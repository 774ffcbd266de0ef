"""One way for tests to run the ``logferry`` command: :func:`logferry`.

Two modes, one result type (:class:`subprocess.CompletedProcess` with text output):

- in process (the default): ``broker.cli.main.main(argv)`` called here, with its own
  stdin, stdout, stderr, environment and logging, restored afterwards. For tests about
  what a command does (its output, its exit code, what it changed in the cluster):
  the interpreter, kazoo and the client library are already loaded, so a call costs
  milliseconds instead of a second of process start.
- ``as_process=True``: ``python -m broker ...`` as a user runs it. For what only a real
  process shows: exit codes seen by a shell, signals, a command that never returns,
  the entry point itself.

Long-running commands (broker, agent, mirror, demo, console) install signal handlers and
never return by themselves: run them as processes (``as_process=True`` with a timeout,
or :class:`subprocess.Popen`), never in process.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from broker.testing import prefork

ROOT = Path(__file__).resolve().parents[2]

LONG_RUNNING = frozenset({"broker", "agent", "mirror", "demo", "console", "load"})
"""Commands that must run as a process (see the module docstring)."""

__all__ = ["logferry"]


def logferry(
    *args: str,
    zk: str | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    as_process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``logferry *args`` and return its exit code, stdout and stderr.

    ``zk`` sets ``LOGFERRY_ZK`` (the default ``--zk``); ``env`` adds to the environment;
    ``stdin`` is the command's standard input (none: empty). ``timeout`` bounds a
    process (an in-process command is bounded by the test's own timeout).
    """
    extra = dict(env or {})
    if zk is not None:
        extra["LOGFERRY_ZK"] = zk
    if as_process or (args and args[0] in LONG_RUNNING):
        return _as_process(list(args), stdin or "", {**os.environ, **extra}, timeout)
    return _in_process(list(args), stdin or "", extra)


def _as_process(
    argv: list[str], stdin: str, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``python -m broker ARGV`` as :func:`subprocess.run` with ``capture_output`` would
    run it, started by ``prefork.start_module`` (forked from the worker's fork server
    when the environment allows)."""
    with tempfile.TemporaryFile() as inp, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        inp.write(stdin.encode())
        inp.seek(0)
        child = prefork.start_module("broker", argv, out, env, ROOT, stdin=inp, errors=err)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
            raise subprocess.TimeoutExpired([sys.executable, "-m", "broker", *argv], timeout) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "broker", *argv], code, _text(out.read()), _text(err.read())
        )


def _text(data: bytes) -> str:
    """As ``text=True`` decodes: universal newlines."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _in_process(argv: list[str], stdin: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``main(argv)`` with private standard streams, environment and root logging."""
    from broker.cli.main import main

    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", write_through=True)
    inp = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_env = {name: os.environ.get(name) for name in env}
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    kazoo_level = logging.getLogger("kazoo").level
    root.handlers = []  # so the command's logging.basicConfig writes to its own stderr
    os.environ.update(env)
    sys.stdin, sys.stdout, sys.stderr = inp, out, err
    try:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors (2), --help and --version (0)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out.flush()
        err.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for handler in root.handlers:
            handler.close()
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        logging.getLogger("kazoo").setLevel(kazoo_level)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(
        ["logferry", *argv],
        code,
        out_bytes.getvalue().decode("utf-8", "replace"),
        err_bytes.getvalue().decode("utf-8", "replace"),
    )
