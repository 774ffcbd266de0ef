"""``logferry mirror --config FILE`` and ``logferry mirror status --config FILE``.

:func:`register` adds both to the project CLI (entry point ``logferry.commands``);
``python -m mirror`` runs the same parser standalone. Exit codes and the error line
follow every logferry command (broker.common.commands): 0 ok (also after SIGTERM), 1
runtime failure, 2 configuration error, 130 after Ctrl-C (once stopped cleanly); errors
print ``logferry mirror: error: <message>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.common.commands import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    exit_code_for,
    report,
    setup_logging,
)
from broker.common.errors import LogferryError
from mirror.errors import MirrorConfigError

if TYPE_CHECKING:
    from mirror.config import MirrorConfig

log = logging.getLogger("logferry.mirror.cli")

STALE_AFTER_S = 10.0
"""A status file older than this means its process is not running."""


def register(subparsers: Any) -> None:
    """Add ``mirror`` (run) and ``mirror status`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "mirror",
        help="copy topics from a source cluster to a target cluster",
        description="Copy batches of the configured topics from the source cluster to the "
        "target, as a member of the mirror consumer group; stop with SIGTERM.",
    )
    parser.add_argument("--config", metavar="TOML", help="mirror config (see docs/mirror.md)")
    parser.set_defaults(func=run_command)
    commands = parser.add_subparsers(dest="mirror_command", metavar="{status}")
    status = commands.add_parser("status", help="per-partition positions and lag of the mirror group")
    status.add_argument("--config", default=argparse.SUPPRESS, metavar="TOML")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=status_command, long_running=False)


def _config(args: argparse.Namespace) -> MirrorConfig:
    # mirror.config imports broker.client (~50 ms of start): here, not in every logferry command's parser
    from mirror.config import load_config

    path = getattr(args, "config", None)
    if not path:
        raise MirrorConfigError("--config", "required: the mirror's TOML config file")
    return load_config(path)


def run_command(args: argparse.Namespace) -> int:
    """Run the mirror in the foreground until SIGTERM/SIGINT."""
    from mirror.core import Mirror
    from mirror.preserve import PreservingMirror

    try:
        config = _config(args)
    except MirrorConfigError as exc:
        return report("mirror", exc, EXIT_USAGE)
    mirror: Mirror | PreservingMirror = PreservingMirror(config) if config.mode == "preserve" else Mirror(config)
    signals: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        signals.append(signum)
        mirror.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):  # before start(): it may wait for an absent target
        signal.signal(sig, on_signal)
    try:
        mirror.start()
    except MirrorConfigError as exc:
        return report("mirror", exc, EXIT_USAGE)
    code = mirror.run()
    log.info("mirror stopped")
    return EXIT_INTERRUPTED if code == EXIT_OK and signal.SIGINT in signals else code


def group_status(config: MirrorConfig) -> dict[str, Any]:
    """The whole mirror group's view from ZooKeeper and the source brokers.

    Works whether or not a mirror runs: committed position and owner per partition,
    source visible end, lag in bytes and estimated messages. The lag is
    :func:`broker.client.group_lag` (the same formula as ``logferry group describe``;
    a partition never committed counts from its log start).
    """
    # broker.client costs ~50 ms of start: here, so that the commands this module registers do not pay it
    from broker.client import GroupAdmin

    with GroupAdmin(config.source_zk, tls=config.source_tls, sasl=config.source_sasl) as admin:
        if not admin.brokers_reachable:
            raise LogferryError(f"no source broker reachable at {config.source_zk}")
        rows = admin.lag(config.group, [t for t in admin.topics() if config.matches(t)])
    partitions: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("error"):
            raise LogferryError(f"{row['topic']}-{row['partition']}: {row['error']}")
        partitions[f"{row['topic']}-{row['partition']}"] = {
            "owner": row["owner"],
            "committed": row["committed"],
            "log_start": row["log_start"],
            "log_end": row["log_end"],
            "lag_bytes": row["lag_bytes"],
            "lag_messages_estimate": row["lag_messages"],
            "gap": row["gap"],
        }
    return {
        "group": config.group,
        "source": config.source_zk,
        "target": config.target_zk,
        "lag_bytes": sum(p["lag_bytes"] or 0 for p in partitions.values()),
        "partitions": partitions,
    }


def status_command(args: argparse.Namespace) -> int:
    """Print the group's positions and lag, plus this config's process status file."""
    try:
        config = _config(args)
    except MirrorConfigError as exc:
        return report("mirror status", exc, EXIT_USAGE)
    doc = group_status(config)
    process = None
    if config.status_file and Path(config.status_file).exists():
        process = json.loads(Path(config.status_file).read_text())
        process["running"] = time.time() - process.get("time", 0) < STALE_AFTER_S
        doc["process"] = process
    if getattr(args, "json", False):
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    print(f"mirror group {doc['group']}: {doc['source']} -> {doc['target']}, lag {doc['lag_bytes']} bytes")
    print(f"{'partition':<32} {'owner':<28} {'committed':>12} {'end':>12} {'lag bytes':>12} {'~lag msgs':>10}")
    for name, p in doc["partitions"].items():
        flag = "  GAP: resume offset deleted by retention" if p["gap"] else ""
        print(
            f"{name:<32} {(p['owner'] or '-')[:28]:<28} {str(p['committed']):>12} "
            f"{p['log_end']:>12} {p['lag_bytes']:>12} {str(p['lag_messages_estimate']):>10}{flag}"
        )
    if process is not None:
        state = "running" if process["running"] else "NOT RUNNING (stale status file)"
        print(
            f"this process (pid {process.get('pid')}): {state}, "
            f"{process.get('messages_per_second', 0):.0f} msgs/s, "
            f"{process.get('bytes_per_second', 0) / 1e6:.2f} MB/s, "
            f"{process.get('messages_total', 0):.0f} messages copied, halted: "
            f"{', '.join(process.get('halted') or {}) or 'none'}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mirror``: the same commands without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="logferry")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["mirror", *(sys.argv[1:] if argv is None else argv)])
    setup_logging(long_running=getattr(args, "long_running", True))
    label = "mirror status" if args.mirror_command else "mirror"
    try:
        return int(args.func(args) or 0)
    except LogferryError as exc:
        return report(label, exc, exit_code_for(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


__all__ = ["group_status", "main", "register"]
