"""Grow a target topic to its source's partition count, so partitions map one to one.

A source topic that gains partitions (``logferry topic alter T --partitions N``) would
otherwise leave the mirror re-hashing its messages into the target's fewer partitions
(:func:`mirror.routing.rehash`). Growing the target keeps batches byte for byte in the
same partition. Partitions are never removed, so a target with more partitions than
its source is left alone.
"""

from __future__ import annotations

import logging

from broker.client import Admin
from broker.common.errors import InvalidPartitionsError, LogferryError

log = logging.getLogger("logferry.mirror.growth")


def grow_target(target: Admin, topic: str, target_n: int, source_n: int) -> int:
    """Give ``topic`` in the target cluster ``source_n`` partitions if it has fewer;
    returns its partition count afterwards (unchanged when growing failed, so the
    caller falls back to re-hashing and says so)."""
    if target_n >= source_n:
        return target_n
    try:
        grown = len(target.create_partitions(topic, source_n))
        log.info("grew target topic %r from %d to %d partitions (as the source)", topic, target_n, grown)
        return grown
    except InvalidPartitionsError:  # another mirror process grew it meanwhile
        return len(target.describe_topic(topic))
    except LogferryError as exc:
        log.warning("could not grow target topic %r to %d partitions: %s", topic, source_n, exc)
        return target_n


__all__ = ["grow_target"]
