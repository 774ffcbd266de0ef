"""``logferry``: one command line for the broker, topics, producing and consuming.

Other packages (agent, mirror, loader) add their subcommands through the
``logferry.commands`` entry point group, so the broker package never imports them.
User mistakes print one line to stderr and exit 2; failures exit 1; no tracebacks.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points
from typing import Sequence

from broker.cli import client_cmds
from broker.common.errors import LogferryError

log = logging.getLogger("logferry.cli")

LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, plugins included."""
    parser = argparse.ArgumentParser(
        prog="logferry",
        description="A log transport in the design of LinkedIn's Kafka (NetDB 2011).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    client_cmds.register(sub)
    from broker.cli import zk_cmd
    zk_cmd.add_parser(sub)
    try:
        from broker.cli import group_cmd
    except ImportError:  # pragma: no cover - consumer groups are optional in a build
        pass
    else:
        group_cmd.add_parser(sub)
    for ep in sorted(entry_points(group="logferry.commands"), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not break the other commands
            log.debug("could not load command %s: %s", ep.name, exc)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``logferry`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except LogferryError as exc:
        print(f"logferry: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
