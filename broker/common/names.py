"""The naming rule for topics, consumer groups and consumer ids (sans IO), written once.

A topic name becomes a directory name on every broker that hosts one of its
partitions (``<topic>-<partition>``) and a znode name under ``/brokers/topics``; a
group name and a consumer id become znode names under ``/consumers``. So one strict
rule serves all three: ``[A-Za-z0-9._-]{1,249}`` and not ``.`` or ``..``. That rules
out path separators (and so path traversal) and the two names ZooKeeper and file
systems reserve.

Everything that accepts a name checks it here: the broker and the registry with
:func:`validate_topic_name` (a wire error), the client and the CLI with
:func:`validate_group_name`, and the agent, mirror and loader configs with
:func:`is_valid_name` and :data:`NAME_RULE` inside their own config errors (which
name the offending key).
"""

from __future__ import annotations

import re
from typing import TypeGuard

from broker.common.errors import ConfigError, InvalidTopicError

MAX_NAME_LENGTH = 249
"""Longest topic name, group name or consumer id."""
NAME_PATTERN = rf"[A-Za-z0-9._-]{{1,{MAX_NAME_LENGTH}}}"
"""The rule as a regular expression (matched whole), for documentation and messages."""
NAME_RULE = f"1-{MAX_NAME_LENGTH} characters from A-Z a-z 0-9 . _ - (and not '.' or '..')"
TRANSACTION_STATE_TOPIC = "__transaction_state"
"""The internal topic of the Kafka transaction coordinators' state (Kafka's name): only
the brokers write it, and no mirror copies it (a cluster's own state, not data)."""
"""The rule in words, for error messages."""

_NAME_RE = re.compile(NAME_PATTERN)
_RESERVED = (".", "..")


def is_valid_name(name: object) -> TypeGuard[str]:
    """True if ``name`` is a legal topic name, group name or consumer id."""
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None and name not in _RESERVED


def _shown(name: object) -> str:
    """``repr`` of a name for a message, shortened so a huge name cannot flood a log."""
    if isinstance(name, str) and len(name) > 60:
        name = name[:57] + "..."
    return repr(name)


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name, else raise InvalidTopicError."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__}")
    if not is_valid_name(name):
        raise InvalidTopicError(f"invalid topic name {_shown(name)}: use {NAME_RULE}")
    return name


def validate_group_name(name: object, what: str = "group name") -> str:
    """Return ``name`` if it is a legal group name (or consumer id: say so in ``what``),
    else raise ConfigError."""
    if not is_valid_name(name):
        raise ConfigError(f"{what} {_shown(name)} must be {NAME_RULE} (it names a ZooKeeper node)")
    return name


def partition_dir_name(topic: str, partition: int) -> str:
    """Directory name of a partition's log: ``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """Inverse of :func:`partition_dir_name`; None for names that are not partitions."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or not is_valid_name(topic):
        return None
    return topic, int(number)


__all__ = [
    "MAX_NAME_LENGTH",
    "NAME_PATTERN",
    "NAME_RULE",
    "TRANSACTION_STATE_TOPIC",
    "is_valid_name",
    "parse_partition_dir_name",
    "partition_dir_name",
    "validate_group_name",
    "validate_topic_name",
]
