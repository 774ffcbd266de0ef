"""What a reload (SIGHUP) may change, and what changed: pure comparisons of two configs.

Only the sources (``[[sources]]``: patterns, excludes, topics, keys, line rules) are
applied while the agent runs. Every other setting names something the process built
at start (the cluster connection and producer, the state directory and its lock, the
metrics port, the read and in-flight limits, the log level): a change to one of those
is reported by :func:`restart_only_changes`, in the config file's own key names, and
takes effect at the next start. The runtime applies the rest
(:meth:`agent.runtime.Agent.reload`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from agent.config import AgentConfig, SourceConfig

RELOADABLE = frozenset({"sources"})
"""AgentConfig fields a reload applies; every other field needs a restart."""

_KEY_NAMES = {
    "zk": "cluster.zk",
    "brokers": "cluster.brokers",
    "metrics_port": "metrics.port",
    "metrics_bind": "metrics.bind",
    "metrics_tls": "metrics.tls",
    "listener": "cluster.listener",
}
"""AgentConfig field -> the key in the TOML file, where they differ."""


def restart_only_changes(old: AgentConfig, new: AgentConfig) -> list[str]:
    """The config keys that differ between ``old`` and ``new`` but cannot change at run
    time (``cluster.zk``, ``state_dir``, ``producer.linger_ms``, ...), in file order."""
    changed: list[str] = []
    for f in dataclasses.fields(AgentConfig):
        if f.name in RELOADABLE:
            continue
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after:
            continue
        if dataclasses.is_dataclass(before) and not isinstance(before, type):
            changed += [f"{f.name}.{k}" for k in _differing(before, after)]
        else:
            changed.append(_KEY_NAMES.get(f.name, f.name))
    return changed


def _differing(before: Any, after: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(before) if getattr(before, f.name) != getattr(after, f.name)]


class SourceChanges(NamedTuple):
    """Source names added, removed and changed by a reload (a source is known by name)."""

    added: list[str]
    removed: list[str]
    changed: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        """``added web; removed old; changed app`` or ``no source changed``."""
        parts = [
            f"{word} {', '.join(names)}"
            for word, names in (("added", self.added), ("removed", self.removed), ("changed", self.changed))
            if names
        ]
        return "; ".join(parts) or "no source changed"


def source_changes(old: Sequence[SourceConfig], new: Sequence[SourceConfig]) -> SourceChanges:
    """Compare two source lists by name."""
    before = {s.name: s for s in old}
    after = {s.name: s for s in new}
    return SourceChanges(
        added=[n for n in after if n not in before],
        removed=[n for n in before if n not in after],
        changed=[n for n in after if n in before and after[n] != before[n]],
    )


def apply_sources(running: AgentConfig, loaded: AgentConfig) -> AgentConfig:
    """The config to run with after a reload: ``running`` with ``loaded``'s sources."""
    return dataclasses.replace(running, sources=loaded.sources)


def held_limit_problem(config: AgentConfig) -> str | None:
    """Why ``config``'s sources do not fit its in-flight cap (the rule the config file is
    checked against, see :func:`agent.config._check_limits`), or None.

    A reload keeps the running ``max_inflight_bytes``; new sources must fit under it.
    """
    for i, source in enumerate(config.sources):
        held = source.max_line_bytes + (source.multiline.max_bytes if source.multiline else 0)
        if held * 2 > config.max_inflight_bytes:
            return (
                f"sources[{i}].max_line_bytes: with multiline.max_bytes it may hold "
                f"{held} bytes per file, more than half the running max_inflight_bytes "
                f"({config.max_inflight_bytes}); raise it and restart the agent"
            )
    return None
