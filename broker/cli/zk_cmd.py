"""``logferry zk start|stop|status``: a local ZooKeeper for development and the demo.

Runs Debian's ZooKeeper (see :mod:`broker.testing.zkserver`) in the background with its
state, log and pidfile in one data dir, so ``stop`` and ``status`` find it from
another shell later. Exit codes: 0 done, 1 failure (including Java or ZooKeeper not
installed: the message says what to run), 2 user mistake (bad option, port taken),
and for ``status`` 3 when it is not running (the LSB convention for service status).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from broker.common.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, report
from broker.common.errors import ZooKeeperError
from broker.testing.zkserver import LocalZooKeeper, ZooKeeperNotInstalledError, ZooKeeperStartError

DEFAULT_PORT = 2181
DEFAULT_DATA_DIR = Path(".logferry/zookeeper")

EXIT_FAILED = EXIT_FAILURE
EXIT_NOT_RUNNING = 3
"""``zk status`` when ZooKeeper is not running (the LSB convention for service status)."""


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    """Register ``zk`` and its ``start``, ``stop`` and ``status`` actions.

    Each action's handler is stored as ``func`` (takes the Namespace, returns the
    exit code), as ``broker.cli.main`` dispatches.
    """
    zk = subparsers.add_parser(
        "zk",
        help="run a local ZooKeeper (Debian's package) in the background",
        description="Start, stop or inspect a local ZooKeeper kept in a data dir.",
    )
    actions = zk.add_subparsers(dest="zk_command", metavar="ACTION")
    actions.required = True
    specs: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("start", "start ZooKeeper in the background (no-op if it runs)", cmd_start),
        ("stop", "stop the ZooKeeper of the data dir (no-op if stopped)", cmd_stop),
        ("status", "tell whether it runs: pid, port, mode, connections", cmd_status),
    ]
    for name, helptext, handler in specs:
        action = actions.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        action.add_argument(
            "--port",
            type=_port,
            default=None,
            help="client port on 127.0.0.1 (default: the port in the data dir's zoo.cfg, "
            f"else {DEFAULT_PORT})",
        )
        action.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"where its state, log and pidfile live (default: ./{DEFAULT_DATA_DIR})",
        )
        if name == "start":
            action.add_argument("--timeout", type=float, default=30.0,
                                help="seconds to wait until it serves (default: 30)")
        action.set_defaults(func=handler)
    return zk


def _port(text: str) -> int:
    """argparse type: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (1-65535)")
    return port


def _error(action: str, message: str) -> None:
    """One line on stderr, no traceback (the format of every logferry command)."""
    report(f"zk {action}", message)


def cmd_start(args: argparse.Namespace) -> int:
    """Start ZooKeeper detached; report where it runs."""
    data_dir: Path = args.data_dir
    existing = LocalZooKeeper.from_data_dir(data_dir)
    pid = existing.pid
    if pid is not None:
        print(f"ZooKeeper already running: pid {pid}, {existing.hosts}, data dir {existing.data_dir}")
        if args.port is not None and args.port != existing.port:
            _error("start", f"it listens on port {existing.port}, not {args.port}; "
                   f"run `logferry zk stop --data-dir {data_dir}` first to change the port")
            return EXIT_USAGE
        return EXIT_OK
    # Without --port, a data dir started before keeps its port (from its zoo.cfg).
    server = LocalZooKeeper(data_dir, args.port or existing.port)
    try:
        server.start(args.timeout, detach=True)
    except ZooKeeperNotInstalledError as exc:
        _error("start", str(exc))
        return EXIT_FAILED
    except ZooKeeperStartError as exc:
        _error("start", f"{exc.summary}; see {exc.log_path or server.log_path}")
        return EXIT_USAGE if "already in use" in exc.summary else EXIT_FAILED
    except (ZooKeeperError, OSError) as exc:
        _error("start", str(exc).splitlines()[0])
        return EXIT_FAILED
    print(f"ZooKeeper started: pid {server.pid}, {server.hosts}, data dir {server.data_dir}, "
          f"log {server.log_path}")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop the data dir's ZooKeeper (SIGTERM, then SIGKILL after 10 s)."""
    server = LocalZooKeeper.from_data_dir(args.data_dir, args.port)
    pid = server.pid
    if pid is None:
        print(f"ZooKeeper is not running (data dir {server.data_dir})")
        return EXIT_OK
    try:
        server.stop()
    except (ZooKeeperError, OSError) as exc:
        _error("stop", str(exc))
        return EXIT_FAILED
    print(f"ZooKeeper stopped (pid {pid})")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print whether it runs, its pid, port, and what ``srvr`` says (mode, connections)."""
    server = LocalZooKeeper.from_data_dir(args.data_dir, args.port)
    pid = server.pid
    if pid is None:
        print(f"ZooKeeper: not running (data dir {server.data_dir})")
        return EXIT_NOT_RUNNING
    print("ZooKeeper: running")
    print(f"  pid: {pid}")
    print(f"  address: {server.hosts}")
    print(f"  data dir: {server.data_dir}")
    print(f"  log: {server.log_path}")
    try:
        fields = server.srvr()
    except OSError as exc:
        print(f"  mode: unknown (no answer to srvr on {server.hosts}: {exc})")
        _error("status", f"ZooKeeper (pid {pid}) does not answer on {server.hosts}: {exc}")
        return EXIT_FAILED
    if "Mode" not in fields:
        print("  mode: not serving yet")
        _error("status", f"ZooKeeper (pid {pid}) is not serving yet on {server.hosts}")
        return EXIT_FAILED
    print(f"  mode: {fields['Mode']}")
    print(f"  connections: {fields.get('Connections', '?')}")
    print(f"  znodes: {fields.get('Node count', '?')}")
    print(f"  version: {fields.get('Zookeeper version', '?').split(',')[0].split('-')[0]}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m broker.cli.zk_cmd ACTION ...``: the zk command on its own."""
    parser = argparse.ArgumentParser(prog="logferry")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["zk", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
