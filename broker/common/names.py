"""Topic names and partition directory names (sans IO).

A topic name becomes a directory name on every broker that hosts one of its
partitions, so the rule is strict: ``[A-Za-z0-9._-]{1,249}`` and not ``.`` or ``..``.
That rules out path separators and so path traversal.
"""

from __future__ import annotations

import re

from broker.common.errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name, else raise InvalidTopicError."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__}")
    if not _TOPIC_RE.fullmatch(name) or name in (".", ".."):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidTopicError(
            f"invalid topic name {shown!r}: use 1-{MAX_TOPIC_LENGTH} characters from "
            "A-Z a-z 0-9 . _ - (and not '.' or '..')"
        )
    return name


def partition_dir_name(topic: str, partition: int) -> str:
    """Directory name of a partition's log: ``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """Inverse of :func:`partition_dir_name`; None for names that are not partitions."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit():
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return topic, int(number)
