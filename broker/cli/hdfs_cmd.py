"""``logferry hdfs start|stop|status``: a local HDFS for development, the tests and the demo.

Runs Apache Hadoop's NameNode and DataNode (see :mod:`broker.testing.hdfs`) in the
background with their metadata, blocks, logs and pidfiles in one data dir, so ``stop``
and ``status`` find them from another shell later, as ``logferry zk`` does for
ZooKeeper. Exit codes: 0 done, 1 failure (including Java or Hadoop's jars missing: the
message says what to run), 2 user mistake (bad option, port taken), and for ``status``
3 when it is not running (the LSB convention for service status).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from broker.cli.zk_cmd import _port
from broker.common.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, report
from broker.testing.hdfs import (
    DEFAULT_HTTP_PORT,
    DEFAULT_PORT,
    HdfsError,
    HdfsNotInstalledError,
    HdfsStartError,
    LocalHdfs,
)

DEFAULT_DATA_DIR = Path(".logferry/hdfs")
EXIT_NOT_RUNNING = 3
"""``hdfs status`` when it is not running (the LSB convention for service status)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``hdfs`` and its ``start``, ``stop`` and ``status`` actions (handlers as ``func``)."""
    hdfs = subparsers.add_parser(
        "hdfs",
        help="run a local HDFS (Apache Hadoop's NameNode and DataNode) in the background",
        description="Start, stop or inspect a local HDFS kept in a data dir.",
    )
    actions = hdfs.add_subparsers(dest="hdfs_command", metavar="ACTION")
    actions.required = True
    specs: list[tuple[str, str, Callable[[argparse.Namespace], int]]] = [
        ("start", "format (the first time) and start a NameNode and a DataNode (no-op if they run)", cmd_start),
        ("stop", "stop the HDFS of the data dir (no-op if stopped)", cmd_stop),
        ("status", "tell whether it runs: pids, URI, live DataNodes, safe mode, logs", cmd_status),
    ]
    for name, helptext, handler in specs:
        action = actions.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        action.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"where its metadata, blocks, logs and pidfiles live (default: ./{DEFAULT_DATA_DIR})",
        )
        if name == "start":
            action.add_argument(
                "--port",
                type=_port,
                default=None,
                help=f"the NameNode's RPC port on 127.0.0.1, the URI's (default: the data dir's, else {DEFAULT_PORT})",
            )
            action.add_argument(
                "--http-port",
                type=_port,
                default=None,
                help=f"the NameNode's HTTP port (web UI, JMX; default: the data dir's, else {DEFAULT_HTTP_PORT})",
            )
            action.add_argument(
                "--timeout", type=float, default=120.0, help="seconds to wait until it takes writes (default: 120)"
            )
        action.set_defaults(func=handler)
    return hdfs


def _error(action: str, message: str) -> None:
    report(f"hdfs {action}", message)


def cmd_start(args: argparse.Namespace) -> int:
    """Start both servers detached; report the URI, the web UI and the logs."""
    existing = LocalHdfs.from_data_dir(args.data_dir)
    if existing.is_running():
        print(f"HDFS already running: {existing.uri}, data dir {existing.data_dir}")
        if args.port is not None and args.port != existing.port:
            _error(
                "start",
                f"it listens on port {existing.port}, not {args.port}; "
                f"run `logferry hdfs stop --data-dir {args.data_dir}` first to change the port",
            )
            return EXIT_USAGE
        return EXIT_OK
    hdfs = LocalHdfs(args.data_dir, args.port or existing.port, args.http_port or existing.http_port)
    try:
        hdfs.start(args.timeout, detach=True)
    except HdfsNotInstalledError as exc:
        _error("start", str(exc))
        return EXIT_FAILURE
    except HdfsStartError as exc:
        _error("start", exc.summary if exc.log_path is None else f"{exc.summary}; see {exc.log_path}")
        return EXIT_USAGE if "already in use" in exc.summary else EXIT_FAILURE
    except (HdfsError, OSError) as exc:
        _error("start", str(exc).splitlines()[0])
        return EXIT_FAILURE
    pids = hdfs.pids()
    print(f"HDFS started: {hdfs.uri} (NameNode pid {pids['namenode']}, DataNode pid {pids['datanode']})")
    print(f"  web UI and JMX: http://{hdfs.http_address}/")
    print(f"  data dir {hdfs.data_dir}, logs {hdfs.log_dir}, client config {hdfs.conf_dir}")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop the data dir's servers (SIGTERM, then SIGKILL after 10 s)."""
    hdfs = LocalHdfs.from_data_dir(args.data_dir)
    pids = {role: pid for role, pid in hdfs.pids().items() if pid is not None}
    if not pids:
        print(f"HDFS is not running (data dir {hdfs.data_dir})")
        return EXIT_OK
    try:
        hdfs.stop()
    except (HdfsError, OSError) as exc:
        _error("stop", str(exc))
        return EXIT_FAILURE
    print("HDFS stopped (" + ", ".join(f"{role} pid {pid}" for role, pid in pids.items()) + ")")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print what runs and what the NameNode says; 3 when nothing runs, 1 when it is not healthy."""
    hdfs = LocalHdfs.from_data_dir(args.data_dir)
    pids = hdfs.pids()
    if not any(pids.values()):
        print(f"HDFS: not running (data dir {hdfs.data_dir})")
        return EXIT_NOT_RUNNING
    print("HDFS: running")
    print(f"  uri: {hdfs.uri}")
    for role in ("namenode", "datanode"):
        print(f"  {role}: " + (f"pid {pids[role]}" if pids[role] else "NOT RUNNING") + f", log {hdfs.log_path(role)}")
    print(f"  web UI and JMX: http://{hdfs.http_address}/")
    print(f"  data dir: {hdfs.data_dir}")
    try:
        state = hdfs.state()
    except (OSError, ValueError) as exc:
        _error("status", f"the NameNode does not answer on http://{hdfs.http_address}/jmx: {exc}")
        return EXIT_FAILURE
    print(f"  live DataNodes: {state.live_datanodes}")
    print(f"  safe mode: {state.safe_mode or 'off'}")
    print(f"  files and directories: {state.files}")
    print(f"  version: {state.version}")
    if not pids["datanode"] or not state.ready:
        why = "its DataNode is not running" if not pids["datanode"] else "it does not take writes yet"
        _error("status", f"HDFS on {hdfs.uri} is not healthy: {why}")
        return EXIT_FAILURE
    return EXIT_OK


__all__ = ["DEFAULT_DATA_DIR", "EXIT_NOT_RUNNING", "add_parser", "cmd_start", "cmd_status", "cmd_stop"]
