"""``logferry console``: serve the web console until SIGTERM or Ctrl-C.

:func:`register` adds the command to the project CLI (entry point
``logferry.commands``). The clusters come from ``--config FILE`` (one ``[[cluster]]``
each, docs/console.md) or from ``--zk`` (repeatable: ``NAME=CONNECT`` or a bare connect
string). It binds 127.0.0.1 unless told otherwise, and prints the URL it serves on
stdout (``console: http://127.0.0.1:8300/``) once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from broker.common.commands import EXIT_INTERRUPTED, EXIT_OK
from broker.common.errors import ConfigError
from broker.common.tls_args import add_sasl_args, add_tls_args, sasl_from_args, tls_from_args
from console.config import DEFAULT_PORT, ConsoleConfig, from_zk, load_config


def register(subparsers: Any) -> None:
    """Add ``console`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "console",
        help="serve a live web console of one or more clusters",
        description="Serve a web page that shows brokers, topics, consumer groups (with "
        "Burrow-style status) and messages of the given clusters, live. Read-only.",
    )
    parser.add_argument(
        "--config", metavar="TOML", help="console config: [console] and one [[cluster]] per cluster (docs/console.md)"
    )
    parser.add_argument(
        "--zk",
        action="append",
        metavar="[NAME=]CONNECT",
        help="a cluster's ZooKeeper connect string with chroot (repeatable; instead of --config)",
    )
    parser.add_argument(
        "--lake",
        action="append",
        metavar="[CLUSTER=]PATH",
        default=[],
        help="a lake the loader lands into (its output.uri: a folder, file:// or hdfs:// URI, "
        "read-only, Parquet or Iceberg), for the landed tier; loaded from CLUSTER (default: the "
        "last cluster); repeatable, with --zk (other [[lake]] keys need --config)",
    )
    parser.add_argument("--host", help="bind address (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT}; 0: a free one)")
    parser.add_argument(
        "--interval", type=float, metavar="SECONDS", help="how often each cluster is read (default 1, at most 2)"
    )
    parser.add_argument(
        "--audit-settle",
        type=float,
        metavar="SECONDS",
        help="judge an audit window (amber, red) only this long after it ended (default 60)",
    )
    add_tls_args(parser)
    add_sasl_args(parser)
    parser.set_defaults(func=run_command)


def config_from_args(args: argparse.Namespace) -> ConsoleConfig:
    """The settings from ``--config`` or ``--zk``, with ``--host/--port/--interval`` on top.

    ``--tls-*``/``--sasl-*`` go with ``--zk`` (to every cluster); a config file gives
    each cluster its own ``[cluster.tls]``/``[cluster.sasl]`` instead."""
    if args.config and args.zk:
        raise ConfigError("give --config or --zk, not both")
    tls, sasl = tls_from_args(args), sasl_from_args(args)
    lakes: list[str] = getattr(args, "lake", None) or []
    if args.config:
        if lakes:
            raise ConfigError("--lake goes with --zk; with --config name each lake in [[lake]]")
        if tls is not None or sasl is not None:
            raise ConfigError(
                "--tls-*/--sasl-* go with --zk; with --config give each "
                "[[cluster]] its own [cluster.tls] and [cluster.sasl]"
            )
        config = load_config(args.config)
    elif args.zk:
        config = from_zk(args.zk, tls=tls, sasl=sasl, lakes=lakes)
    else:
        raise ConfigError("name the clusters: --config FILE or --zk CONNECT (repeatable)")
    host: str = args.host or config.host
    port: int = config.port if args.port is None else args.port
    interval: float = config.interval_s if args.interval is None else args.interval
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: must be 0-65535")
    if not 0 < interval <= 2:
        raise ConfigError(f"--interval {interval}: must be above 0 and at most 2")
    settle = config.audit_settle_s if getattr(args, "audit_settle", None) is None else args.audit_settle
    if not settle > 0:
        raise ConfigError(f"--audit-settle {settle}: must be above 0 seconds")
    return ConsoleConfig(
        config.clusters, host, port, interval, config.audit_topic, lakes=config.lakes, audit_settle_s=settle
    )


def run_command(args: argparse.Namespace) -> int:
    """Serve until SIGTERM (exit 0) or SIGINT (exit 130)."""
    config = config_from_args(args)
    from console.server import serve  # aiohttp: the 'console' extra

    signals: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            signals.append(signum)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

        def started(url: str) -> None:
            print(f"console: {url}", flush=True)

        await serve(config, stop, started)

    try:
        asyncio.run(main())
    except OSError as exc:
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    sys.stdout.flush()
    return EXIT_INTERRUPTED if signal.SIGINT in signals else EXIT_OK


__all__ = ["config_from_args", "register", "run_command"]
