"""What a topic's own settings mean for this broker: its log config and its codec (sans IO).

A topic's overrides (:mod:`broker.common.topic_config`, stored in ZooKeeper) replace
the matching fields of the broker's ``[log]`` settings; the broker applies the result
to each partition log it hosts on every cluster view, so a change takes effect without
a restart (the next append, roll or retention pass uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from broker.common.topic_config import CHECKS
from broker.storage.config import LogConfig
from broker.wire.codecs import CODEC_NONE, CODECS
from broker.wire.records import batch_length_at, compress_batch

LOG_KEYS = ("retention_ms", "retention_bytes", "segment_bytes", "segment_ms", "visibility", "cleanup_policy")
"""Per-topic keys that are fields of :class:`LogConfig`."""


def log_config_for(base: LogConfig, overrides: Mapping[str, Any]) -> LogConfig:
    """``base`` with the topic's log overrides applied (``base`` itself when none), each
    typed by its check in :mod:`broker.common.topic_config`."""
    changes = {k: CHECKS[k](k, overrides[k]) for k in LOG_KEYS if k in overrides}
    return replace(base, **changes) if changes else base


def codec_for(overrides: Mapping[str, Any]) -> int | None:
    """The codec the leader compresses uncompressed batches with; None: store as sent
    (``compression`` unset or ``producer``)."""
    name = overrides.get("compression")
    if not isinstance(name, str) or name == "producer":
        return None
    return CODECS.get(name)


def compress_message_set(chunk: bytes | memoryview, codec: int) -> bytes | memoryview:
    """A validated message set with each uncompressed batch compressed by ``codec``
    (compressed batches kept byte for byte); ``chunk`` itself when nothing changed."""
    if codec == CODEC_NONE:
        return chunk
    view = memoryview(chunk)
    parts: list[bytes | memoryview] = []
    changed = False
    pos = 0
    while pos < len(view):
        length = batch_length_at(view, pos)
        batch = view[pos : pos + length]
        packed = compress_batch(batch, codec)
        changed = changed or packed is not batch
        parts.append(packed)
        pos += length
    return b"".join(parts) if changed else chunk


__all__ = ["LOG_KEYS", "codec_for", "compress_message_set", "log_config_for"]
