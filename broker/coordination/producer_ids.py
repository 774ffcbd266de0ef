"""Producer ids for idempotent producers, unique in a cluster, from ZooKeeper.

Brokers take ids in blocks: ``/latest_producer_id_block`` holds ``{"next": N}``, the
first id no broker has claimed yet; a broker claims ``[N, N + BLOCK_SIZE)`` with a
conditional write (the znode's version), so two brokers never get the same block,
and hands its ids out from memory. A block unused when a broker stops is lost (ids
are never reused, as in Kafka). One ZooKeeper write per :data:`BLOCK_SIZE` producers.

The first block of a cluster starts at a random multiple of 2**32 below 2**62: ids
of two clusters then differ (their high 30 bits are drawn at random), so batches the
mirror copies from one cluster into another, which keep their producer ids, do not
collide with the ids of the target cluster's own producers.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.common.errors import ZooKeeperError
from broker.coordination import zk

PRODUCER_ID_BLOCK = "/latest_producer_id_block"
"""Persistent ``{"next": first unclaimed producer id}``."""
BLOCK_SIZE = 1000
_MAX_TRIES = 50


def first_id(rng: random.Random | None = None) -> int:
    """Where a new cluster's producer ids start: a random multiple of 2**32 below 2**62."""
    return (rng or random.SystemRandom()).getrandbits(30) << 32


def claim_block(client: Any, size: int = BLOCK_SIZE) -> tuple[int, int]:
    """Claim the next ``size`` ids in ZooKeeper; returns ``[start, end)``.

    Blocking (call it off the event loop); ZooKeeperError if ZooKeeper fails.
    """
    try:
        for _ in range(_MAX_TRIES):
            try:
                raw, stat = client.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                start = first_id()
                try:
                    client.create(PRODUCER_ID_BLOCK, zk.encode({"next": start + size}), makepath=True)
                    return start, start + size
                except NodeExistsError:
                    continue  # another broker made it first
            start = int(zk.decode(raw)["next"])
            try:
                client.set(PRODUCER_ID_BLOCK, zk.encode({"next": start + size}), version=stat.version)
                return start, start + size
            except BadVersionError:
                continue  # another broker claimed this block: read again
    except (KazooException, KeyError, ValueError, TypeError) as exc:
        raise ZooKeeperError(
            f"cannot claim a block of producer ids in ZooKeeper ({PRODUCER_ID_BLOCK}): {exc!r}"
        ) from None
    raise ZooKeeperError(
        f"cannot claim a block of producer ids: {_MAX_TRIES} conditional "
        f"writes of {PRODUCER_ID_BLOCK} lost to other brokers"
    )


class ProducerIdAllocator:
    """Hands out producer ids from the blocks this broker claimed (thread-safe)."""

    def __init__(self, client: Any, block_size: int = BLOCK_SIZE):
        self.client = client
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        """A producer id no one in the cluster got before. Blocking: it may claim a block."""
        with self._lock:
            if self._next >= self._end:
                self._next, self._end = claim_block(self.client, self.block_size)
            pid = self._next
            self._next += 1
            return pid


__all__ = ["BLOCK_SIZE", "PRODUCER_ID_BLOCK", "ProducerIdAllocator", "claim_block", "first_id"]
