"""A fork server for the test suite's Python processes: import once, fork for each start.

The suite starts some 360 brokers and a hundred mirrors and CLI runs, and each
``python -m broker ...`` spends about 0.3 s of its 0.4 s of CPU to ready on starting the
interpreter and importing the same modules. A :class:`ForkServer` is one process per
pytest worker that imports them once (``preload``) and forks a child for each start; the
child sets up what ``exec`` would have (argv, environment, working directory, its stdin,
stdout and stderr, default signal dispositions) and runs the module as ``python -m``
would, in a process of its own: its own pid, sockets, files, signals and exit status.
What a fork skips is the interpreter's start and the imports, nothing of the program.
A child asked for by a thread inside a network namespace (:func:`broker.testing.netns.inside`,
the hosts of :mod:`broker.testing.network`) enters that namespace before it runs, as an
exec'd child of that thread would be there: one fork server serves every host.

:class:`ForkedProcess` answers as much of :class:`subprocess.Popen` as the harnesses
use (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``,
``kill``). The server reaps its children and sends each one's exit status, as
``Popen.returncode`` would give it (``-9`` for kill -9), on the connection that asked
for it. A start whose environment differs from the server's is not forked (a module may
read the environment as it is imported): :meth:`ForkServer.can_fork` says so, and the
caller starts that one with ``exec``. Nothing here is used by a deployed process.

    python -m broker.testing.prefork SOCKET MODULE...   the server (ForkServer starts it)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib
import json
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from broker.testing import netns

ROOT = Path(__file__).resolve().parents[2]
PRELOAD = (
    "broker.cli.main",
    "broker.cli.zk_secure_cmd",
    "broker.server.broker",
    "broker.server.kafka.front_end",
    "broker.client",
    "mirror.cli",
    "mirror.config",
    "mirror.core",
    "mirror.preserve",
    "agent.cli",
    "agent.runtime",
    "importlib.metadata",
    "encodings.idna",
)
"""What a broker (with a Kafka listener), a mirror and an agent import by the time they
serve: the roots, each pulls in the rest. A module missing here is imported by the child."""
READ_AT_START = ("PYTHON", "LC_", "LANG", "LD_", "TZ", "MSGPACK_", "PROMETHEUS_")
"""Prefixes of the environment variables the interpreter and the preloaded modules read as
they start (encoding, locale, the dynamic loader, the time zone, msgpack's and
prometheus_client's switches): a child whose values differ is exec'd. Every other
variable is read, if at all, while the program runs, with the child's own environment;
a fixture that sets ``SPARK_LOCAL_IP`` or pytest's ``PYTEST_CURRENT_TEST`` changes
nothing here. (PYTHONUNBUFFERED aside: the server's stdio is unbuffered already.)"""
START_TIMEOUT = 120.0
"""How long the server may take to import what it preloads (a crash is seen at once:
its exit). About a second of CPU; on a machine loaded about 25 (three pytest workers
each starting a nemesis's servers at once, beside two busy loops and other jobs) three
servers took over 30 s each."""
_MAX_MESSAGE = 1 << 20
_PR_SET_NAME = 15


class ChildProcess(Protocol):
    """What the harnesses use of a child: :class:`subprocess.Popen` and :class:`ForkedProcess` both are one."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class ForkServerError(RuntimeError):
    """The fork server could not be started or did not answer."""


class ForkedProcess:
    """A child of the fork server, seen as :class:`subprocess.Popen` sees its child."""

    def __init__(self, args: Sequence[str], pid: int, connection: socket.socket):
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._connection = connection
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit status if the process has ended, else None (never blocks)."""
        return self._settle(0.0)

    def wait(self, timeout: float | None = None) -> int:
        """Block until the process ends; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        code = self._settle(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        """Signal the process, unless it has ended (as Popen does)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _settle(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self._connection], [], [], timeout)
            if not ready:
                return None
            data = self._connection.recv(_MAX_MESSAGE)
            self._connection.close()
            if data:
                self.returncode = int(json.loads(data)["exit"])
            else:  # the server is gone without a word: wait for the pid to disappear
                self.returncode = _wait_gone(self.pid, timeout)
            return self.returncode


def _wait_gone(pid: int, timeout: float | None) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and (deadline is None or time.monotonic() < deadline):
        time.sleep(0.05)
    return -signal.SIGKILL


class ForkServer:
    """One fork server process, started at the first :meth:`spawn`; :meth:`stop` ends it."""

    def __init__(self, directory: Path, preload: Iterable[str] = PRELOAD, cwd: Path = ROOT):
        self.preload = list(preload)
        self.socket_path = directory / "prefork.sock"
        self.log_file = directory / "prefork.log"
        self.cwd = cwd
        self.forked = 0
        self._env: dict[str, str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._namespace = ""
        """The server's network namespace: a child asked for from another is moved there."""
        self._lock = threading.Lock()

    def can_fork(self, env: Mapping[str, str], cwd: Path | str) -> bool:
        """True if a child with this environment and working directory may be forked: the
        same as the server's in what was read as it started (:data:`READ_AT_START`).
        The server starts (at the first spawn) with this process's environment of then."""
        if Path(cwd).resolve() != self.cwd.resolve():
            return False
        return _read_at_start(self._env or os.environ) == _read_at_start(env)

    def spawn(
        self,
        module: str,
        args: Sequence[str],
        stdin: int,
        stdout: int,
        stderr: int,
        env: Mapping[str, str],
        cwd: Path | str,
    ) -> ForkedProcess:
        """Run ``python -m module args`` in a forked child with these file descriptors."""
        self._ensure_started()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # A caller thread in another network namespace than the server's (a host of the
        # test network) gets its child there: the child enters the namespace sent along.
        here = netns.thread_namespace()
        namespace = None if here in ("", self._namespace) else netns.thread_namespace_fd()
        try:
            connection.settimeout(START_TIMEOUT)
            connection.connect(str(self.socket_path))
            request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd)}
            fds = [stdin, stdout, stderr] if namespace is None else [stdin, stdout, stderr, namespace]
            socket.send_fds(connection, [json.dumps(request).encode()], fds)
            answer = connection.recv(_MAX_MESSAGE)
            connection.settimeout(None)
        except OSError as exc:
            connection.close()
            raise ForkServerError(f"the fork server did not answer ({exc}); its log: {self.log_file}") from exc
        finally:
            if namespace is not None:
                os.close(namespace)
        if not answer:
            connection.close()
            raise ForkServerError(f"the fork server closed the connection; its log: {self.log_file}")
        reply = json.loads(answer)
        if "error" in reply:
            connection.close()
            raise ForkServerError(f"the fork server could not start {module}: {reply['error']}")
        self.forked += 1
        return ForkedProcess([sys.executable, "-m", module, *args], int(reply["pid"]), connection)

    def stop(self) -> None:
        """End the server (its running children are not touched: their owners stop them)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        with self.log_file.open("a") as log:
            log.write(f"prefork: forked {self.forked} children\n")
        if proc.stdin is not None:
            proc.stdin.close()  # the server ends at EOF on its stdin
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self.socket_path.parent.mkdir(parents=True, exist_ok=True)
            self.socket_path.unlink(missing_ok=True)
            self._env = dict(os.environ)
            # in the process's own network namespace, whichever thread starts it: a server
            # on a test host would die with the host's namespace
            with self.log_file.open("ab") as log, netns.at_home():
                self._proc = subprocess.Popen(
                    [sys.executable, "-u", "-m", __name__, str(self.socket_path), *self.preload],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(self.cwd),
                    env=self._env,
                )
            deadline = time.monotonic() + START_TIMEOUT
            while not self.socket_path.exists():
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_file.read_text(errors="replace")[-2000:]
                    raise ForkServerError(f"the fork server did not start:\n{tail}")
                time.sleep(0.02)
            self._namespace = netns.process_namespace(self._proc.pid)
            atexit.register(self.stop)


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_START) and k != "PYTHONUNBUFFERED"}


_installed: ForkServer | None = None


def install(server: ForkServer | None) -> None:
    """Start :func:`start_module`'s children from ``server`` from now on (None: exec each)."""
    global _installed
    _installed = server


def start_module(
    module: str,
    args: Sequence[str],
    output: IO[bytes],
    env: Mapping[str, str],
    cwd: Path | str = ROOT,
    *,
    stdin: IO[bytes] | None = None,
    errors: IO[bytes] | None = None,
) -> ChildProcess:
    """``python -m module args`` with stdout to ``output``, stderr to ``errors`` (none: to
    ``output`` too) and stdin from ``stdin`` (none: /dev/null): forked from the installed
    fork server when it may be, else exec'd."""
    server = _installed
    with open(os.devnull, "rb") as null:
        source = stdin or null
        if server is not None and server.can_fork(env, cwd):
            fds = (source.fileno(), output.fileno(), (errors or output).fileno())
            return server.spawn(module, args, *fds, env, cwd)
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=output,
            stderr=errors or subprocess.STDOUT,
            stdin=source,
            cwd=str(cwd),
            env=dict(env),
        )


# -- the server process ---------------------------------------------------------------------


def serve(socket_path: str, preload: Sequence[str]) -> None:
    """Import ``preload``, then fork a child for each request until stdin closes."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a child imports it again and meets the error itself
            print(f"prefork: could not preload {name}: {exc}", file=sys.stderr)
    gc.collect()
    gc.freeze()  # the children's collections leave the preloaded objects (and their pages) alone
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path + ".tmp")
    listener.listen(64)
    os.rename(socket_path + ".tmp", socket_path)  # the path appears once connections are taken
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    while True:
        for key, _ in selector.select():
            if key.data == "listener":
                connection, _ = listener.accept()
                _start(connection, children, (listener, selector, wake_r, wake_w))
            elif key.data == "child":
                os.read(wake_r, 4096)
                _reap(children)
            elif not os.read(sys.stdin.fileno(), 4096):
                return  # the pytest worker that started us is done (or gone)


def _start(connection: socket.socket, children: dict[int, socket.socket], server_parts: tuple[Any, ...]) -> None:
    try:
        data, fds, _, _ = socket.recv_fds(connection, _MAX_MESSAGE, 4)
        request = json.loads(data)
    except (OSError, ValueError) as exc:
        _send(connection, {"error": f"bad request: {exc}"})
        connection.close()
        return
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        _send(connection, {"error": f"fork failed: {exc}"})
        connection.close()
        return
    if pid == 0:
        _child(request, fds, server_parts, [connection, *children.values()])
    for fd in fds:
        os.close(fd)
    children[pid] = connection
    _send(connection, {"pid": pid})


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            _send(connection, {"exit": os.waitstatus_to_exitcode(status)})
            connection.close()


def _send(connection: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the asker may be gone
        connection.send(json.dumps(message).encode())


def _child(request: dict[str, Any], fds: list[int], server_parts: tuple[Any, ...], connections: list[Any]) -> None:
    """Become ``python -m module args``; never returns."""
    code = 1
    try:
        listener, selector, wake_r, wake_w = server_parts
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        selector.close()
        listener.close()
        for connection in connections:
            connection.close()
        os.close(wake_r)
        os.close(wake_w)
        if len(fds) > 3:  # the asker's network namespace (ForkServer.spawn)
            netns.setns(fds[3])
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        module = request["module"]
        _name_process(module, request["args"])
        sys.argv = [module, *request["args"]]
        code = _run(module)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _run(module: str) -> int:
    """Run the module as ``python -m`` does, and end as the interpreter would."""
    code, interrupted = 0, False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if interrupted:  # as the interpreter does: die of the SIGINT, for the parent to see
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _name_process(module: str, args: Sequence[str]) -> None:
    """``lf-<command>`` (``lf-broker``, ``lf-mirror``, ``lf-agent``) in /proc/<pid>/comm, so
    a process listing tells the children apart."""
    command = args[0] if module == "broker" and args else module
    name = f"lf-{command}"[:15].encode()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 1:
        print("usage: python -m broker.testing.prefork SOCKET [MODULE...]", file=sys.stderr)
        return 2
    serve(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
