"""Per-partition log settings: when to roll, flush and delete segments.

Parsing and validating the TOML file is :mod:`broker.server.config`'s job; this dataclass is
what the storage layer needs once that is done, with the paper's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.common.topic_config import VISIBILITY_CHOICES as VISIBILITIES

VISIBILITY_FLUSHED, VISIBILITY_WRITTEN = VISIBILITIES
"""``flushed``: consumers read a byte once it is fsynced, so no crash can take back what
they saw (the paper's rule, the default). ``written``: once it is written to the
operating system; a broker process that dies (kill -9) loses none of it, a machine that
loses power may lose what was not yet fsynced (how Kafka, Redis and NATS expose data by
default)."""


@dataclass(frozen=True)
class LogConfig:
    """How every partition log on a broker rolls, flushes and retains its segments."""

    segment_bytes: int = 1 << 30
    """Roll to a new segment before an append would grow the active one past this."""
    segment_ms: int = 7 * 24 * 3600 * 1000
    """Roll a non-empty active segment once it is older than this (ms)."""
    group_commit: bool = True
    """fsync each log dir's new bytes as soon as the previous fsync of it ended (group
    commit: consumers see data one fsync after it was appended); False: the paper's
    timer policy below."""
    flush_messages: int = 10000
    """fsync once this many messages are unflushed (1 = before every acknowledgement,
    also with group commit)."""
    flush_ms: int = 200
    """fsync once the oldest unflushed append is older than this (ms; with group commit
    only a backstop)."""
    retention_ms: int = 168 * 3600 * 1000
    """Delete whole segments not modified for longer than this (ms)."""
    retention_bytes: int = -1
    """Delete the oldest segments while a partition is larger than this; -1 = unlimited."""
    cleanup_policy: str = "delete"
    """``delete``: retention (the two settings above) deletes old segments; ``compact``:
    never (a topic's ``cleanup_policy``, Kafka's ``cleanup.policy``: logferry never
    compacts, so such a log keeps every record)."""
    visibility: str = VISIBILITY_FLUSHED
    """When consumers may read appended bytes: :data:`VISIBILITY_FLUSHED` or
    :data:`VISIBILITY_WRITTEN` (a replicated partition also waits for its in-sync
    replicas either way). A written log is fsynced by ``flush_messages`` and
    ``flush_ms`` also under group commit (its consumers do not wait for the fsync)."""
