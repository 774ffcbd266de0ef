"""logferry's host agent: tails application log files and publishes them to brokers.

The package is split into a sans-IO core (``lines``, ``multiline``, ``identity``,
``acks``, ``inflight``, ``audit``, ``encode``) that turns bytes and file facts into
decisions, and a thin IO layer (``files``, ``discovery``, ``inventory``,
``checkpoint``, ``metrics``, ``runtime``) that reads files, talks to the producer and
writes state. See docs/agent.md.
"""

from agent.errors import AgentError, ConfigError

__all__ = ["AgentError", "ConfigError"]
