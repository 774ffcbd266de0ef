"""Where a source batch goes in the target cluster.

Source partition p goes to target partition p, batch bytes untouched, except that a
batch that arrives uncompressed is compressed with the mirror's ``compression`` (the
payload only: no message is decoded; a compressed batch is never touched). Missing target
topics are created with the source's partition count, and grown to it when the source
grows (:mod:`mirror.growth`). When a target topic still has fewer partitions than its
source (growing it failed), partition p cannot be kept: the mirror says so loudly,
decodes those batches and re-hashes the messages by key as the producer does
(crc32(key) % n; keyless messages go to p % n), re-encoding them with the source
batch's codec (the mirror's, for an uncompressed one). Only this fallback decodes
anything.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable

from broker.client import CODEC_NONE, CODECS, Admin, SimpleConsumer, compress_batch, decode_batch, encode_batch
from broker.common.errors import TopicExistsError, UnknownTopicOrPartitionError
from mirror.growth import grow_target

log = logging.getLogger("logferry.mirror.routing")

RECHECK_S = 30.0
"""Partition counts are looked up again after this long (sources may grow)."""


def rehash(
    batch_bytes: bytes | memoryview, source_partition: int, target_count: int, codec: int = CODEC_NONE
) -> dict[int, bytes]:
    """Split one batch into one re-encoded batch per target partition (the fallback).

    The parts keep the batch's codec; an uncompressed batch's parts get ``codec``, and
    so do those of a Kafka producer's snappy batch (logferry batches have no snappy).
    """
    batch = decode_batch(batch_bytes)
    codec = batch.codec if batch.codec in CODECS.values() and batch.codec != CODEC_NONE else codec
    keys = batch.keys or [None] * len(batch.values)
    stamps = batch.timestamps
    groups: dict[int, tuple[list[bytes | None], list[bytes], list[int]]] = {}
    for key, value, ts in zip(keys, batch.values, stamps, strict=True):
        p = zlib.crc32(key) % target_count if key is not None else source_partition % target_count
        ks, vs, tss = groups.setdefault(p, ([], [], []))
        ks.append(key)
        vs.append(value)
        tss.append(ts)
    return {
        p: encode_batch(vs, ks if any(k is not None for k in ks) else None, tss, codec)
        for p, (ks, vs, tss) in groups.items()
    }


class Router:
    """Knows (and creates) target topics; maps each source batch to target batches."""

    def __init__(
        self,
        source: SimpleConsumer,
        target: Admin,
        on_rehash: Callable[[str], None] | None = None,
        codec: int = CODEC_NONE,
    ):
        self.source = source
        self.target = target
        self.on_rehash = on_rehash
        self.codec = codec
        """Codec for batches that arrive uncompressed (CODEC_NONE: copy them as they are)."""
        self._counts: dict[str, tuple[int, int, float]] = {}  # topic -> (source n, target n, when)

    def counts(self, topic: str, partition: int) -> tuple[int, int]:
        """``(source partitions, target partitions)``, creating the target topic if missing."""
        cached = self._counts.get(topic)
        now = time.monotonic()
        if cached is not None and partition < cached[0] and now - cached[2] < RECHECK_S:
            return cached[0], cached[1]
        if cached is not None:
            self.source.cluster.forget(topic)  # it may have grown: read its count afresh
        source_n = len(self.source.partitions(topic))
        source_n = max(source_n, partition + 1)
        target_n = self._target_count(topic, source_n)
        if target_n < source_n and (cached is None or cached[1] >= cached[0]):
            log.error(
                "MIRROR PARTITIONS NOT PRESERVED: target topic %r has %d partitions, the "
                "source has %d; its messages are re-hashed by key (order kept per key only). "
                "Give the target topic %d partitions to keep partitions.",
                topic,
                target_n,
                source_n,
                source_n,
            )
        self._counts[topic] = (source_n, target_n, now)
        return source_n, target_n

    def _target_count(self, topic: str, source_n: int) -> int:
        try:
            return grow_target(self.target, topic, len(self.target.describe_topic(topic)), source_n)
        except UnknownTopicOrPartitionError:
            pass
        try:
            created = self.target.create_topic(topic, partitions=source_n)
            log.info("created target topic %r with %d partitions (as the source)", topic, source_n)
            return len(created)
        except TopicExistsError:  # another mirror process was quicker
            return len(self.target.describe_topic(topic))

    def route(self, topic: str, partition: int, raw: memoryview | bytes) -> list[tuple[int, bytes | memoryview]]:
        """``[(target partition, batch bytes)]`` for one source batch."""
        source_n, target_n = self.counts(topic, partition)
        if target_n >= source_n:
            return [(partition, compress_batch(raw, self.codec) if self.codec else raw)]
        if self.on_rehash is not None:
            self.on_rehash(topic)
        return sorted(rehash(raw, partition, target_n, self.codec).items())


__all__ = ["Router", "rehash"]
