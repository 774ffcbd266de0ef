"""``logferry``: one command line for the broker, topics, producing and consuming.

Other packages (agent, mirror, loader, demo) add their subcommands through the
``logferry.commands`` entry point group, so the broker package never imports them.
A plugin that cannot be loaded (most often: its extra is not installed) is named on
stderr with the reason and the fix, and its command stays listed, failing with the
same message, instead of vanishing.
User mistakes print one line to stderr and exit 2; failures exit 1; no tracebacks.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from typing import Sequence

from broker import __version__
from broker.cli import client_cmds, group_cmd, zk_cmd
from broker.common.errors import LogferryError

log = logging.getLogger("logferry.cli")

LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, plugins included."""
    parser = argparse.ArgumentParser(
        prog="logferry",
        description="A log transport in the design of LinkedIn's Kafka (NetDB 2011).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    client_cmds.register(sub)
    zk_cmd.add_parser(sub)
    group_cmd.add_parser(sub)
    for ep in sorted(entry_points(group="logferry.commands"), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not break the other commands
            problem = plugin_problem(ep.name, exc)
            print(f"logferry: warning: {problem}", file=sys.stderr)
            _unavailable(sub, ep.name, problem)
    return parser


def version() -> str:
    """The installed distribution's version (the package's own in a bare checkout)."""
    try:
        return distribution("logferry").version
    except PackageNotFoundError:
        return __version__


def plugin_problem(command: str, exc: BaseException) -> str:
    """One line: which command is unavailable, why, and what to do about it."""
    reason = f"{type(exc).__name__}: {exc}"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    extra = extra_providing(missing) if missing else None
    if extra is not None:
        fix = f"install it with: pip install 'logferry[{extra}]'"
    elif missing is not None and importlib.util.find_spec(missing.partition(".")[0]) is None:
        fix = "install the missing module, or everything with: pip install 'logferry[all]'"
    else:
        fix = "this is a bug in the plugin or a broken install: reinstall logferry and run with -v"
    return f"command '{command}' is unavailable ({reason}); {fix}"


def extra_providing(module: str) -> str | None:
    """The extra of this distribution whose requirements include ``module``'s package."""
    top = module.partition(".")[0].lower().replace("_", "-")
    try:
        requires = distribution("logferry").requires or []
    except PackageNotFoundError:
        return None
    for requirement in requires:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if name and extra and name.group(0).lower().replace("_", "-") == top:
            return extra.group(1)
    return None


def _unavailable(sub: argparse._SubParsersAction, command: str, problem: str) -> None:
    """Keep ``command`` listed; running it prints ``problem`` and exits 1."""
    # No option prefix: whatever follows (--config, --help, ...) is taken, not parsed.
    p = sub.add_parser(command, help="(unavailable: run it to see why)", add_help=False,
                       prefix_chars="\0")
    p.add_argument("rest", nargs="*")

    def fail(_args: argparse.Namespace) -> int:
        print(f"logferry: error: {problem}", file=sys.stderr)
        return 1
    p.set_defaults(func=fail)


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
    except ModuleNotFoundError as exc:  # an extra that this command needs is missing
        log.debug("import failed", exc_info=True)
        print(f"logferry: error: {plugin_problem(args.command, exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
