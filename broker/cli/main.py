"""``logferry``: one command line for the broker, topics, producing and consuming.

Other packages (agent, mirror, loader, demo) add their subcommands through the
``logferry.commands`` entry point group, so the broker package never imports them.
A plugin that cannot be loaded (most often: its extra is not installed) is named on
stderr with the reason and the fix, and its command stays listed, failing with the
same message, instead of vanishing.
Every command keeps the rule of :mod:`broker.common.commands`: one line
``logferry <command>: error: <message>`` on stderr, exit 2 for a usage or config
mistake, 1 for a failure, 130 after Ctrl-C; no tracebacks (``-vv`` logs them). A
command's parser sets ``long_running=False`` for WARNING logs by default (INFO
otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import NoAuthError

from broker import __version__
from broker.cli import acl_cmd, certs_cmd, client_cmds, group_cmd, hdfs_cmd, reassign_cmd, user_cmd, zk_cmd
from broker.common.commands import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    LOG_FORMAT,
    exit_code_for,
    report,
    setup_logging,
)
from broker.common.errors import LogferryError

log = logging.getLogger("logferry.cli")

SHORT_LIVED = ("topic", "produce", "consume", "group", "zk", "hdfs", "certs", "acl", "user")
"""Commands that log at WARNING unless -v: their output is what the user asked for."""

__all__ = ["LOG_FORMAT", "build_parser", "command_label", "main"]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every built-in command, and the plugins' commands unless
    ``command`` is a built-in one (then none) or a plugin's (then that one). A broker,
    `topic` or `consume` process thus starts without reading the installed
    distributions' entry points or importing the agent's, mirror's and loader's command
    lines, and a broken plugin warns only where it is asked for or listed."""
    parser = argparse.ArgumentParser(
        prog="logferry", description="A log transport in the design of LinkedIn's Kafka (NetDB 2011)."
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log more: -v one level (INFO for short commands, DEBUG for services), -vv everything",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    client_cmds.register(sub)
    zk_cmd.add_parser(sub)
    hdfs_cmd.add_parser(sub)
    group_cmd.add_parser(sub)
    certs_cmd.add_parser(sub)
    acl_cmd.add_parser(sub)
    user_cmd.add_parser(sub)
    reassign_cmd.add_parser(sub)
    if command is None or command not in sub.choices:
        _add_plugins(sub, command)
    for name in SHORT_LIVED:
        sub.choices[name].set_defaults(long_running=False)
    _verbose_everywhere(sub)
    return parser


def _add_plugins(sub: argparse._SubParsersAction[argparse.ArgumentParser], command: str | None) -> None:
    """The ``logferry.commands`` entry points: the one named ``command`` if there is
    one, else all (for the list in --help and in a usage error)."""
    found = plugin_entry_points()
    wanted = [ep for ep in found if ep.name == command] or found
    for ep in wanted:
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not break the other commands
            problem = plugin_problem(ep.name, exc)
            print(f"logferry: warning: {problem}", file=sys.stderr)
            _unavailable(sub, ep.name, problem)


def plugin_entry_points() -> list[Any]:
    """The installed ``logferry.commands`` entry points, by name."""
    from importlib.metadata import entry_points  # about 30 ms: only when a plugin may be meant

    return sorted(entry_points(group="logferry.commands"), key=lambda e: e.name)


class _VersionAction(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"{parser.prog} {version()}")  # on stdout, as argparse's own version action
        parser.exit()


def command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top-level
    options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _verbose_everywhere(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Accept ``-v`` after the command too (``logferry consume -v ...``), counted with the
    one before it."""
    for parser in set(sub.choices.values()):
        with contextlib.suppress(argparse.ArgumentError, ValueError):  # taken, or an unavailable command
            parser.add_argument(
                "-v",
                "--verbose",
                action="count",
                dest="verbose_after",
                default=argparse.SUPPRESS,
                help="log more (-vv: everything)",
            )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _verbose_everywhere(action)


def command_label(args: argparse.Namespace) -> str:
    """The command as typed, without options: ``topic create``, ``agent status``, ``broker``.

    A command with actions stores the action in ``<command>_command`` (argparse dest).
    """
    command = str(getattr(args, "command", "") or "")
    action = getattr(args, f"{command}_command", None)
    return f"{command} {action}" if action else command


def version() -> str:
    """The installed distribution's version (the package's own in a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, distribution

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
    from importlib.metadata import PackageNotFoundError, distribution

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


def _unavailable(sub: argparse._SubParsersAction[argparse.ArgumentParser], command: str, problem: str) -> None:
    """Keep ``command`` listed; running it prints ``problem`` and exits 1."""
    # No option prefix: whatever follows (--config, --help, ...) is taken, not parsed.
    p = sub.add_parser(command, help="(unavailable: run it to see why)", add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs="*")

    def fail(_args: argparse.Namespace) -> int:
        return report(command, problem, EXIT_FAILURE)

    p.set_defaults(func=fail)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``logferry`` console script; returns the exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_in(words))
    try:
        args = parser.parse_args(words)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    verbosity = args.verbose + getattr(args, "verbose_after", 0)
    setup_logging(verbosity, long_running=getattr(args, "long_running", True))
    label = command_label(args)
    try:
        return int(args.func(args) or 0)
    except LogferryError as exc:
        log.debug("%s failed", label, exc_info=True)
        return report(label, exc, exit_code_for(exc))
    except NoAuthError:  # a secured ZooKeeper (docs/security.md, "ZooKeeper")
        log.debug("%s failed", label, exc_info=True)
        return report(
            label,
            "ZooKeeper refused access (NoAuth): log in as an identity "
            "allowed there (--zk-user with --zk-password-file)",
            EXIT_FAILURE,
        )
    except ModuleNotFoundError as exc:  # an extra that this command needs is missing
        log.debug("import failed", exc_info=True)
        return report(label, plugin_problem(args.command, exc), EXIT_FAILURE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `logferry consume ... | head`: the reader has all it wants
        _silence_stdout()
        return 0
    except OSError as exc:  # a file or socket the command needed (not a bug: no traceback)
        log.debug("%s failed", label, exc_info=True)
        return report(label, exc, EXIT_FAILURE)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush raises no second
    BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
