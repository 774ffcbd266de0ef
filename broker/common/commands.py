"""The contract every ``logferry`` command keeps: exit codes, the error line, log levels.

One rule for every command (broker, topic, produce, consume, group, zk, agent, mirror,
load, demo), so scripts and service managers can tell a typo from an outage:

- exit :data:`EXIT_OK` (0) on success, :data:`EXIT_FAILURE` (1) when the command
  failed at run time (a cluster that is not there, messages not delivered),
  :data:`EXIT_USAGE` (2) for a usage or configuration mistake (what argparse does too),
  :data:`EXIT_INTERRUPTED` (130) after Ctrl-C; a few commands add a documented code of
  their own (``zk status`` 3: not running; ``load`` 3: audit below the bar);
- an error is one line on stderr, ``logferry <command>: error: <message>`` (argparse's
  own format, so usage errors and ours look the same), never a traceback;
- short-lived commands log at WARNING by default, long-running ones at INFO; ``-v``
  makes either one step more verbose, ``-vv`` shows DEBUG.

Plugins (agent, mirror, hadoop_loader, demo) import this module from broker.common.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from broker.common.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicConfigError,
    InvalidTopicError,
    ReassignmentError,
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

USAGE_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    InvalidTopicError,
    InvalidTopicConfigError,
    InvalidPartitionsError,
    ReassignmentError,
)
"""Broker-package errors that mean the user asked for something wrong (exit 2)."""

LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def error_line(command: str, message: object) -> str:
    """``logferry <command>: error: <message>``, on one line.

    ``command`` is the command as typed without its options (``topic create``,
    ``agent status``); a message of several lines keeps only its first.
    """
    text = str(message).strip().splitlines()
    return f"logferry {command}: error: {text[0] if text else 'failed'}"


def report(command: str, message: object, code: int = EXIT_FAILURE, stream: TextIO | None = None) -> int:
    """Print :func:`error_line` on stderr (or ``stream``) and return ``code``."""
    print(error_line(command, message), file=stream or sys.stderr, flush=True)
    return code


def exit_code_for(exc: BaseException) -> int:
    """:data:`EXIT_USAGE` for a usage or config error of the broker package, else 1."""
    return EXIT_USAGE if isinstance(exc, USAGE_ERRORS) else EXIT_FAILURE


def log_level(verbosity: int, long_running: bool) -> int:
    """The root log level: WARNING (short-lived) or INFO (long-running), ``-v`` one step
    more, ``-vv`` DEBUG."""
    base = logging.INFO if long_running else logging.WARNING
    return max(logging.DEBUG, base - 10 * max(verbosity, 0))


def setup_logging(verbosity: int = 0, long_running: bool = True) -> None:
    """Configure the root logger on stderr at :func:`log_level`; kazoo's chatter stays at
    WARNING unless ``-vv``."""
    level = log_level(verbosity, long_running)
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger().setLevel(level)
    logging.getLogger("kazoo").setLevel(logging.DEBUG if verbosity >= 2 else logging.WARNING)


__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "LOG_FORMAT",
    "error_line",
    "exit_code_for",
    "log_level",
    "report",
    "setup_logging",
]
