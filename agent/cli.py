"""``logferry agent``, ``agent status`` and ``agent check``: the agent's command line.

:func:`register` adds the commands to the project CLI's argparse subparsers (loaded
through the ``logferry.commands`` entry point group); ``python -m agent`` uses the
same parser standalone. Handlers return an exit code; a user's mistake (bad config,
agent not running) prints one line to stderr, never a traceback.

Exit codes and the error line follow every logferry command (broker.common.commands):
0 ok (also after SIGTERM), 1 runtime failure (or status: agent not running), 2 usage or
configuration error, 130 after Ctrl-C (once the agent stopped cleanly); errors print
``logferry agent: error: <message>``. ``agent check`` exits 1 when the cluster cannot be
reached (or the checkpoint cannot be read), 2 for a bad config.

Signals of a running agent: SIGTERM and SIGINT stop it cleanly, SIGHUP re-reads the
config file and applies its sources (:meth:`agent.runtime.Agent.reload`), SIGUSR1
dumps every thread's stack.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import ssl
import sys
import time
from typing import TYPE_CHECKING, Any

from agent.errors import AgentError, ConfigError, StatusUnavailableError
from broker.common.commands import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    LOG_FORMAT,
    report,
)

if TYPE_CHECKING:
    from agent.config import AgentConfig

STALE_AFTER_S = 10.0
"""A status file older than this (with no endpoint answering) means the agent is not running."""


def register(subparsers: Any) -> None:
    """Add ``agent`` (run) and ``agent status`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "agent",
        help="tail log files and publish them to a broker cluster",
        description="Tail the log files named in the config and publish every line to the "
        "brokers; stop with SIGTERM or Ctrl-C (the checkpoint is written).",
    )
    parser.add_argument(
        "--config", required=False, metavar="TOML", help="agent config file (see docs/agent.md and etc/agent.toml)"
    )
    parser.set_defaults(func=run_command, handler=run_command)
    commands = parser.add_subparsers(dest="agent_command", metavar="{status,check}")
    status = commands.add_parser(
        "status",
        help="show a running agent's files, lag and counters",
        description="Read the running agent's /status endpoint (or its status file) and summarise it.",
    )
    status.add_argument("--config", default=argparse.SUPPRESS, metavar="TOML", help="the running agent's config file")
    status.add_argument("--json", action="store_true", help="print the raw status document")
    status.add_argument("--files", action="store_true", help="list every tailed file")
    status.set_defaults(func=status_command, handler=status_command, long_running=False)
    check = commands.add_parser(
        "check",
        help="validate a config, list the files it matches, try the cluster",
        description="Validate the config, list the files each source matches now and the "
        "offset the agent would start each at (its checkpoint is only read), "
        "and reach the cluster and look up the topics, as the agent would; "
        "ships nothing. Exit 0 ok, 1 cluster unreachable, 2 config error.",
    )
    check.add_argument("--config", default=argparse.SUPPRESS, metavar="TOML", help="the agent config file to check")
    check.add_argument("--no-cluster", action="store_true", help="do not contact the cluster (config and files only)")
    check.set_defaults(func=check_command, handler=check_command, long_running=False)


def _config(args: argparse.Namespace) -> AgentConfig:
    # agent.config costs ~10 ms of start: here, not in every logferry command's parser
    from agent.config import load_config

    path = getattr(args, "config", None)
    if not path:
        raise ConfigError("--config", "required: the agent's TOML config file")
    return load_config(path)


def run_command(args: argparse.Namespace) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT."""
    try:
        config = _config(args)
    except AgentError as exc:
        return report("agent", exc, EXIT_USAGE)
    logging.basicConfig(level=config.log_level, stream=sys.stderr, format=LOG_FORMAT)
    logging.getLogger("logferry.agent").setLevel(config.log_level)
    from agent.runtime import Agent

    agent = Agent(config, reload_config=lambda: _config(args))
    signals: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("logferry.agent").info("signal %d: stopping", signum)
        signals.append(signum)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda _signum, _frame: agent.reload())
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: thread dump
    try:
        code = agent.run()
    except AgentError as exc:
        return report("agent", exc, EXIT_FAILURE)
    return EXIT_INTERRUPTED if code == EXIT_OK and signal.SIGINT in signals else code


def check_command(args: argparse.Namespace) -> int:
    """Validate, list the files and their start offsets, try the cluster; ship nothing."""
    from agent.check import check_cluster, cluster_problems, format_cluster, format_files, plan_files

    try:
        config = _config(args)
    except AgentError as exc:
        return report("agent check", exc, EXIT_USAGE)
    cluster = f"ZooKeeper {config.zk}" if config.zk else f"{len(config.brokers or ())} brokers"
    print(
        f"config {args.config}: valid; host {config.host}, {len(config.sources)} source"
        f"{'s' if len(config.sources) != 1 else ''}, state_dir {config.state_dir}, {cluster}"
    )
    try:
        plans, entries = plan_files(config)
    except AgentError as exc:
        return report("agent check", exc, EXIT_FAILURE)
    print("\n".join(format_files(config, plans, entries)), flush=True)
    if getattr(args, "no_cluster", False):
        print("cluster: not contacted (--no-cluster)")
        return EXIT_OK
    from broker.client import LogferryError

    try:
        found = check_cluster(config)
    except LogferryError as exc:
        return report("agent check", f"cluster not reachable: {exc}", EXIT_FAILURE)
    print("\n".join(format_cluster(config, found)), flush=True)
    problems = cluster_problems(found)
    if problems:
        return report("agent check", "; ".join(problems), EXIT_FAILURE)
    print("ok: the agent can start with this config")
    return EXIT_OK


def read_status(config: AgentConfig) -> dict[str, Any]:
    """The running agent's status document, from its endpoint or its status file."""
    # urllib.request (with http.client) costs ~6 ms of start: only `agent status` needs it
    import urllib.error
    import urllib.request

    file_doc: dict[str, Any] | None = None
    try:
        file_doc = json.loads(config.status_path.read_text())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise StatusUnavailableError(f"cannot read {config.status_path}: {exc}") from None
    urls = []
    if config.metrics_port:
        scheme = "https" if config.metrics_tls else "http"
        urls.append(f"{scheme}://{config.metrics_bind}:{config.metrics_port}")
    if file_doc and file_doc.get("metrics_url") and file_doc["metrics_url"] not in urls:
        urls.append(file_doc["metrics_url"])
    for url in urls:
        try:
            with urllib.request.urlopen(f"{url}/status", timeout=3, context=_status_context(config)) as response:
                document: dict[str, Any] = json.loads(response.read())
                return document
        except (urllib.error.URLError, OSError, ValueError):
            continue
    if file_doc is None:
        raise StatusUnavailableError(
            f"no agent status: nothing answers at {', '.join(urls) or '(no metrics port)'} "
            f"and {config.status_path} does not exist; is the agent running with this config?"
        )
    return file_doc


def _status_context(config: AgentConfig) -> ssl.SSLContext | None:
    """Trust for an HTTPS status endpoint: ``[metrics.tls] ca_file`` (the CA that
    signed the agent's certificate, when set), else the system's CAs."""
    tls = config.metrics_tls
    if tls is None:
        return None
    return ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)


def status_command(args: argparse.Namespace) -> int:
    """Print a summary of the running agent (exit 1 when it is not running)."""
    try:
        config = _config(args)
        doc = read_status(config)
    except ConfigError as exc:
        return report("agent status", exc, EXIT_USAGE)
    except AgentError as exc:
        return report("agent status", exc, EXIT_FAILURE)
    if getattr(args, "json", False):
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(format_status(doc, show_files=getattr(args, "files", False)))
    age = time.time() - float(doc.get("updated", 0))
    running = doc.get("state") == "running" and age <= STALE_AFTER_S
    return 0 if running else 1


def format_status(doc: dict[str, Any], show_files: bool = False) -> str:
    """A few human lines: state, files, lag, counters."""
    counters = doc.get("counters", {})
    gauges = doc.get("gauges", {})
    age = time.time() - float(doc.get("updated", 0))
    state = doc.get("state", "?")
    if state == "running" and age > STALE_AFTER_S:
        state = f"not running (last status {age:.0f}s ago)"
    lines = [
        f"agent {doc.get('host', '?')} pid {doc.get('pid', '?')}: {state}",
        f"files: {gauges.get('tracked_files', 0)} tracked, {gauges.get('open_files', 0)} open, "
        f"lag {gauges.get('lag_bytes', 0)} bytes",
        f"in flight: {gauges.get('inflight_bytes', 0)} of {gauges.get('inflight_bytes_cap', 0)} "
        f"bytes (peak {gauges.get('inflight_bytes_max', 0)})",
        f"messages: {counters.get('messages_sent', 0)} sent, {counters.get('messages_acked', 0)} "
        f"acked, {counters.get('messages_failed', 0)} failed, "
        f"{counters.get('messages_dropped', 0)} dropped, {counters.get('lines_cut', 0)} lines cut",
        f"errors: {counters.get('errors', 0)}, rotations {counters.get('rotations', 0)}, "
        f"truncations {counters.get('truncations', 0)}, config reloads "
        f"{counters.get('reloads', 0)} ({counters.get('reload_failures', 0)} refused)",
    ]
    if doc.get("parse_failures"):
        lines.append(
            "parse failures: " + ", ".join(f"{source} {count}" for source, count in doc["parse_failures"].items())
        )
    if show_files:
        for entry in doc.get("files", []):
            lines.append(
                f"  {entry['path']} (inode {entry['inode']}): offset {entry['offset']} "
                f"of {entry['size']}, lag {entry['lag']}"
                + (" [rotated]" if entry.get("rotated") else "")
                + (" [deleted]" if entry.get("deleted") else "")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m agent``: the same commands without the project CLI around them."""
    parser = argparse.ArgumentParser(prog="logferry")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["agent", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))
