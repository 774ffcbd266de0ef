"""The agent's error hierarchy: one root, :class:`AgentError`.

Errors a user can cause (a bad config, an unreadable state directory, an agent that
is not running) carry a one-line message that says what to fix; the CLI prints it
without a traceback. Errors from the client library are converted at the edge
(``runtime``) so callers only ever catch ``AgentError``.
"""

from __future__ import annotations

from broker.common.config import format_error


class AgentError(Exception):
    """Root of every error the agent package raises on purpose."""


class ConfigError(AgentError):
    """The agent's TOML config is missing, malformed or out of range.

    ``key`` is the dotted path of the offending key (``sources[1].pattern``) and ``file``
    the config file ("" for a dict), so the message points at the line to fix; the
    message has the format of every logferry config error, ``<file>: <key>: <problem>``.
    """

    def __init__(self, key: str, message: str, file: str = ""):
        super().__init__(format_error(file, key, message))
        self.key = key
        self.file = file


class CheckpointError(AgentError):
    """The checkpoint file cannot be read or written (permissions, disk full, corrupt)."""


class StatusUnavailableError(AgentError):
    """``agent status`` found neither a metrics endpoint nor a status file to read."""


class PublishError(AgentError):
    """The producer could not be created or refused a configuration (wraps broker errors)."""
