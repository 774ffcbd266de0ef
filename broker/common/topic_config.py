"""Per-topic settings: their names, how they are checked, and how ``k=v`` text reads (sans IO).

A topic may override a few of the broker's settings. The overrides live in ZooKeeper
beside the topic's replica assignment (``/brokers/topics/<topic>``, field ``config``);
every broker watches that node and applies a change without a restart. A key the topic
does not set takes the broker's own setting (``[log]`` and ``[broker]`` tables).

========================  ====================================================
key                       meaning (the broker setting it overrides)
========================  ====================================================
``retention_ms``          delete segments not modified for longer (``log.retention_ms``)
``retention_bytes``       delete the oldest segments beyond this size; -1 unlimited
                          (``log.retention_bytes``)
``segment_bytes``         roll a new segment at this size (``log.segment_bytes``)
``segment_ms``            roll a non-empty segment older than this (``log.segment_ms``)
``min_insync_replicas``   in-sync replicas an acks=all produce needs, 1 to the
                          replication factor (``broker.min_insync_replicas``)
``compression``           ``producer`` (store batches as sent) or a codec
                          (``none``, ``gzip``, ``lz4``, ``zstd``): the leader compresses
                          uncompressed batches with it; a compressed batch is stored as
                          sent (never re-encoded)
``visibility``            ``flushed`` (consumers read fsynced bytes only) or ``written``
                          (at once: survives a broker crash, not a power loss)
                          (``log.visibility``)
``cleanup_policy``        ``delete`` (retention deletes old segments) or ``compact``:
                          never deleted by retention. logferry never compacts, so a
                          compact topic keeps every record, which holds what compaction
                          promises its readers (the latest value of every key) at the
                          cost of its disk (Kafka's ``cleanup.policy``, which Kafka
                          Connect and MirrorMaker 2 require of their state topics)
========================  ====================================================

Every error is a :class:`~broker.common.errors.InvalidTopicConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.common.errors import InvalidTopicConfigError

COMPRESSION_CHOICES = ("producer", "none", "gzip", "lz4", "zstd")
"""``producer``: keep what the producer sent; a codec: compress uncompressed batches."""
CLEANUP_POLICIES = ("delete", "compact")
"""``delete``: retention applies; ``compact``: the log is never deleted by retention."""
VISIBILITY_CHOICES = ("flushed", "written")
"""When consumers may read appended bytes; also the ``[log] visibility`` values
(``broker.storage.config``)."""

MIN_SEGMENT_BYTES = 1024
"""A smaller segment would roll at nearly every batch."""


def _integer(minimum: int, what: str) -> Callable[[str, Any], int]:
    def check(key: str, value: Any) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise InvalidTopicConfigError(
                    f"topic setting {key}: {value!r} is not an integer ({what})", key=key
                ) from None
        if type(value) is not int or value < minimum:
            raise InvalidTopicConfigError(f"topic setting {key}: {value!r} is not {what}", key=key)
        return value

    return check


def _choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise InvalidTopicConfigError(f"topic setting {key}: {value!r} is not one of {', '.join(choices)}", key=key)
        return value.strip().lower()

    return check


CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "retention_ms": _integer(1, "a positive number of milliseconds"),
    "retention_bytes": _integer(-1, "an integer >= 0, or -1 for unlimited"),
    "segment_bytes": _integer(MIN_SEGMENT_BYTES, f"a number of bytes >= {MIN_SEGMENT_BYTES}"),
    "segment_ms": _integer(1, "a positive number of milliseconds"),
    "min_insync_replicas": _integer(1, "a positive integer"),
    "compression": _choice(COMPRESSION_CHOICES),
    "visibility": _choice(VISIBILITY_CHOICES),
    "cleanup_policy": _choice(CLEANUP_POLICIES),
}
"""Every per-topic key and the function that checks (and types) its value."""

KEYS = tuple(sorted(CHECKS))


def check_key(key: Any) -> str:
    """``key`` if it is a per-topic setting; InvalidTopicConfigError naming the known ones."""
    if not isinstance(key, str) or key not in CHECKS:
        raise InvalidTopicConfigError(
            f"unknown topic setting {key!r}; the settings are {', '.join(KEYS)}", key=str(key)
        )
    return key


def validate(config: Mapping[Any, Any]) -> dict[str, Any]:
    """Check every key and value of ``config``; return them typed (ints, lower-case names)."""
    return {check_key(k): CHECKS[k](k, v) for k, v in config.items()}


def parse_pairs(pairs: Iterable[str]) -> dict[str, Any]:
    """Read ``k=v`` strings (the CLI's repeated ``--config``) into a checked dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidTopicConfigError(
                f"--config {pair!r}: write it as key=value, e.g. retention_ms=3600000", key=key
            )
        check_key(key)
        out[key] = CHECKS[key](key, value)
    return out


def check_min_insync(config: Mapping[str, Any], replication_factor: int) -> None:
    """``min_insync_replicas`` must not exceed the replication factor (acks=all would
    refuse every write)."""
    value = config.get("min_insync_replicas")
    if value is not None and value > replication_factor:
        raise InvalidTopicConfigError(
            f"topic setting min_insync_replicas: {value} is more than the replication "
            f"factor ({replication_factor}); acks=all would refuse every write",
            key="min_insync_replicas",
        )


def altered(current: Mapping[str, Any], set_: Mapping[str, Any], delete: Iterable[str]) -> dict[str, Any]:
    """``current`` with ``set_`` applied and ``delete`` removed (both checked)."""
    new = dict(current)
    new.update(validate(set_))
    for key in delete:
        new.pop(check_key(key), None)
    return new


__all__ = [
    "CHECKS",
    "CLEANUP_POLICIES",
    "COMPRESSION_CHOICES",
    "KEYS",
    "altered",
    "check_key",
    "check_min_insync",
    "parse_pairs",
    "validate",
]
