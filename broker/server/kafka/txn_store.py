"""Where the transaction coordinator keeps its state: ``__transaction_state``, as Kafka.

The records are :mod:`broker.server.kafka.txn_log`'s. This module is the IO around them:

* **The topic** is created by the first broker asked to find a transactional id's
  coordinator (:meth:`TxnStateLog.ensure_topic`): :data:`DEFAULT_PARTITIONS` partitions,
  replication factor 3 capped at the live brokers, ``min_insync_replicas`` 2 capped at
  that, ``cleanup_policy = compact`` (never deleted by retention: snapshots bound it).
* **The coordinator** of an id is the leader of its partition. Only that broker answers
  the id's requests (others: NOT_COORDINATOR, so the client finds the new one), and
  only a leader's acks=all appends are ever confirmed (a deposed leader's are not:
  :mod:`broker.replication.leader`), so two brokers never both change an id's state.
* **Loading**: the first time a broker needs a partition it leads (a request, or the
  expiry round every second), and again after each change of its leader epoch, it reads
  the partition from its log start to its end and replays the records
  (:class:`~broker.server.kafka.txn_log.Replay`); requests of its ids wait for that.
  Ids that ZooKeeper holds from before (``/kafka_transactions/<id>``, written by the
  coordinators of logferry before this log) and the log does not are taken over: their
  state is appended to the log and the znode marked as a mirror.
* **Writes** (:meth:`TxnStateLog.put`) append one record with acks=all through the
  broker's own produce path and return once every in-sync replica has it; the state in
  memory changes when the record is appended (the same event loop turn), so memory and
  log never disagree on the leader. A write whose replication fails leaves its record in
  the log, as Kafka's does: the client sees an error and retries.
* **Snapshots** (:meth:`TxnStateLog.maybe_snapshot`): once a partition holds more than
  :data:`SNAPSHOT_BYTES` (or twice its last snapshot), the coordinator appends every
  id's state in one produce request (appended in one event loop turn, so nothing
  interleaves) and then moves the log start there (Kafka's DeleteRecords mechanism: the
  followers follow), so loading reads at most a few MiB.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker.common.errors import CorruptBatchError, LogferryError, NotLeaderError, StorageError, error_for_code
from broker.coordination import transactions as zk_store
from broker.coordination.registry import ClusterView
from broker.replication.roles import LEADER
from broker.server.kafka.txn_log import TOMBSTONE, TOPIC, Replay, encode_records, partition_for, snapshot_batches
from broker.server.kafka.txn_state import TxnError
from broker.server.services.produce import INTERNAL, ProduceService
from broker.server.services.results import ProduceResult
from broker.storage.partition_log import PartitionLog
from broker.wire.produce import MessageSet, ProduceRequest
from broker.wire.records import MAX_BATCH_BYTES

log = logging.getLogger("logferry.kafka")

DEFAULT_PARTITIONS = 8
"""Partitions of ``__transaction_state`` (Kafka's ``transaction.state.log.num.partitions``
is 50; fewer here: each is a directory and a replica to follow). Fixed at creation:
an id's partition is its hash modulo the count."""
DEFAULT_REPLICATION_FACTOR = 3
"""Kafka's ``transaction.state.log.replication.factor``; capped at the live brokers."""
DEFAULT_MIN_INSYNC = 2
"""Kafka's ``transaction.state.log.min.isr``; capped at the replication factor."""
SEGMENT_BYTES = 4 * 1024 * 1024
"""The topic's segments: small, so that a snapshot frees the disk below it soon."""
SNAPSHOT_BYTES = 8 * 1024 * 1024
"""A partition longer than this (and than twice its last snapshot) gets a snapshot."""
_READ_BYTES = 1024 * 1024
_versions = itertools.count(1)


@dataclass
class _Partition:
    """One partition of ``__transaction_state`` this broker leads, loaded."""

    partition: int
    epoch: int
    """The leader epoch it was loaded in: another one means load it again."""
    plog: PartitionLog
    states: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    """Transactional id -> its state (JSON) and a version (a number that changes at
    each write, never reused: a request that read one version writes only over it)."""
    snapshot_bytes: int = 0
    """Size of the last snapshot."""
    snapshotting: bool = False


class TxnStateLog:
    """The transaction coordinator's state in ``__transaction_state`` (module docstring)."""

    def __init__(
        self,
        broker_id: int,
        view: Callable[[], ClusterView],
        replicas: Callable[[], dict[tuple[str, int], Any]],
        produce: ProduceService,
        create_topic: Callable[..., Awaitable[Any]],
        zk_client: Callable[[], Any],
        pool: Any,
        partitions: int = DEFAULT_PARTITIONS,
        replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        min_insync: int = DEFAULT_MIN_INSYNC,
        snapshot_bytes: int = SNAPSHOT_BYTES,
    ):
        self.broker_id = broker_id
        self.view = view
        self.replicas = replicas
        """This broker's replicas (:attr:`ReplicaManager.replicas`): their roles and epochs."""
        self.produce = produce
        self.create_topic = create_topic
        """:meth:`AdminService.create_in_zk`."""
        self.zk_client = zk_client
        self.pool = pool
        self.num_partitions = partitions
        self.replication_factor = replication_factor
        self.min_insync = min_insync
        self.snapshot_bytes = snapshot_bytes
        self._parts: dict[int, _Partition] = {}
        self._loading: dict[int, asyncio.Lock] = {}
        self._creating: asyncio.Future[None] | None = None
        self.on_load: Callable[[dict[str, bytes]], None] | None = None
        """Called with the states of a partition just loaded (the service notes which
        are due for a timeout or unfinished markers)."""

    # -- the topic and the coordinators ----------------------------------------------------

    def partitions(self) -> int | None:
        """How many partitions ``__transaction_state`` has (None: it does not exist yet)."""
        assignment = self.view().topics.get(TOPIC)
        return len(assignment) if assignment else None

    def coordinator(self, transactional_id: str) -> int:
        """The broker that coordinates the id: its partition's leader (-1: none yet)."""
        n = self.partitions()
        return -1 if n is None else self.view().leader(TOPIC, partition_for(transactional_id, n))

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` unless it exists (one creation at a time here;
        another broker's concurrent one wins harmlessly)."""
        if self.partitions() is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creating)

    async def _create(self) -> None:
        live = max(len(self.view().brokers), 1)
        rf = min(self.replication_factor, live)
        log.info("creating %s: %d partitions, replication factor %d", TOPIC, self.num_partitions, rf)
        await self.create_topic(
            TOPIC,
            self.num_partitions,
            rf,
            min(self.min_insync, rf),
            exists_ok=True,
            config={"cleanup_policy": "compact", "segment_bytes": SEGMENT_BYTES},
        )

    def _led(self, partition: int) -> Any:
        replica = self.replicas().get((TOPIC, partition))
        return replica if replica is not None and replica.role == LEADER else None

    def leads(self, transactional_id: str) -> bool:
        """Whether this broker leads the id's partition (so coordinates it)."""
        n = self.partitions()
        return n is not None and self._led(partition_for(transactional_id, n)) is not None

    def led_partitions(self) -> list[int]:
        """The partitions of ``__transaction_state`` this broker leads now."""
        n = self.partitions() or 0
        return [p for p in range(n) if self._led(p) is not None]

    # -- loading -----------------------------------------------------------------------------

    async def partition(self, transactional_id: str) -> _Partition:
        """The loaded partition of the id; TxnError NOT_COORDINATOR unless this broker
        leads it."""
        n = self.partitions()
        if n is None:
            raise TxnError(ErrorCode.not_coordinator, f"{TOPIC} does not exist yet: find the coordinator first")
        return await self.load(partition_for(transactional_id, n), transactional_id)

    async def load(self, partition: int, why: str = "") -> _Partition:
        """Partition ``partition``, loaded if it was not in the current leader epoch."""
        replica = self._led(partition)
        if replica is None:
            self._parts.pop(partition, None)
            raise TxnError(
                ErrorCode.not_coordinator,
                f"broker {self.broker_id} does not lead {TOPIC}-{partition}, so does not coordinate {why!r}",
            )
        part = self._parts.get(partition)
        if part is not None and part.epoch == replica.epoch and part.plog is replica.plog:
            return part
        lock = self._loading.setdefault(partition, asyncio.Lock())
        async with lock:
            part = self._parts.get(partition)
            if part is not None and part.epoch == replica.epoch and part.plog is replica.plog:
                return part
            self._parts.pop(partition, None)
            part = await self._load(partition, replica.epoch, replica.plog)
            if self._led(partition) is not replica or replica.epoch != part.epoch:
                raise TxnError(ErrorCode.not_coordinator, f"leadership of {TOPIC}-{partition} moved while loading it")
            self._parts[partition] = part
        if self.on_load is not None:
            self.on_load({i: raw for i, (raw, _) in part.states.items()})
        return part

    async def _load(self, partition: int, epoch: int, plog: PartitionLog) -> _Partition:
        started = time.monotonic()
        rebuilt = Replay(plog.start_offset)
        end = plog.end_offset
        size = _READ_BYTES
        while rebuilt.offset < end:
            chunk = plog.read_bytes(rebuilt.offset, size)
            try:
                used = rebuilt.feed(chunk)
            except CorruptBatchError as exc:
                raise StorageError(f"{TOPIC}-{partition} cannot be replayed: {exc}") from None
            if used == 0:  # a batch longer than the read
                if len(chunk) < size or size >= MAX_BATCH_BYTES:
                    raise StorageError(f"{TOPIC}-{partition}: no whole batch at byte {rebuilt.offset}")
                size *= 4
                continue
            size = _READ_BYTES
            await asyncio.sleep(0)  # a long log does not hold the loop
        part = _Partition(partition, epoch, plog, {i: (raw, next(_versions)) for i, raw in rebuilt.states.items()})
        await self._take_over_zookeeper(part)
        log.info(
            "%s-%d loaded in leader epoch %d: %d transactional ids from %d records (%d bytes) in %.0f ms",
            TOPIC,
            partition,
            epoch,
            len(part.states),
            rebuilt.records,
            end - plog.start_offset,
            (time.monotonic() - started) * 1000,
        )
        return part

    async def _take_over_zookeeper(self, part: _Partition) -> None:
        """Append the states ZooKeeper holds for ids of the partition the log does not
        (written by a coordinator of before this log), then mark their znodes as
        mirrors, so they are taken once."""
        loop = asyncio.get_running_loop()
        n = self.partitions() or 1
        ids = await loop.run_in_executor(self.pool, lambda: zk_store.list_ids(self.zk_client()))
        found: list[tuple[str, bytes, int]] = []
        for txn_id in ids:
            if partition_for(txn_id, n) != part.partition or txn_id in part.states:
                continue
            got = await loop.run_in_executor(self.pool, zk_store.read_state, self.zk_client(), txn_id)
            if got is None:
                continue
            raw, version = got
            try:
                if json.loads(raw).get("mirror"):
                    continue  # written beside this log: the log had it (forgotten since)
            except (ValueError, AttributeError):
                log.warning("transactional id %r: unreadable state in ZooKeeper, not taken over", txn_id)
                continue
            found.append((txn_id, raw, version))
        if not found:
            return
        await self._append(part, [(i, raw) for i, raw, _ in found], {i: (raw, next(_versions)) for i, raw, _ in found})
        for txn_id, raw, version in found:
            mirror = zk_store.as_mirror(raw)
            try:
                await loop.run_in_executor(self.pool, zk_store.write_state, self.zk_client(), txn_id, mirror, version)
            except LogferryError as exc:  # taken again at the next load: the same state
                log.info("transactional id %r: ZooKeeper state not marked taken over: %s", txn_id, exc)
        log.info("%s-%d: took over %d transactional ids from ZooKeeper", TOPIC, part.partition, len(found))

    # -- reading and writing ---------------------------------------------------------------

    async def get(self, transactional_id: str) -> tuple[bytes, int] | None:
        """The id's state and version, None if it has none; TxnError NOT_COORDINATOR
        unless this broker coordinates it."""
        part = await self.partition(transactional_id)
        return part.states.get(transactional_id)

    async def put(self, transactional_id: str, value: bytes, version: int | None) -> int:
        """Store the id's state if it is still at ``version`` (None: it has none);
        returns the new version once the in-sync replicas have it.
        StaleStateError if it changed (or was loaded again) since."""
        part = await self.partition(transactional_id)
        current = part.states.get(transactional_id)
        if (current[1] if current is not None else None) != version:
            raise zk_store.StaleStateError(f"the state of {transactional_id!r} changed since it was read")
        new = next(_versions)
        await self._append(part, [(transactional_id, value)], {transactional_id: (value, new)})
        return new

    async def forget(self, transactional_id: str, version: int) -> bool:
        """Write the id's tombstone if it is still at ``version``; False if it changed."""
        part = await self.partition(transactional_id)
        current = part.states.get(transactional_id)
        if current is None or current[1] != version:
            return False
        await self._append(part, [(transactional_id, TOMBSTONE)], {transactional_id: None})
        return True

    def loaded(self) -> dict[str, tuple[bytes, int]]:
        """Every id of the partitions loaded and still led here, with state and version."""
        out: dict[str, tuple[bytes, int]] = {}
        for p, part in list(self._parts.items()):
            replica = self._led(p)
            if replica is None or replica.epoch != part.epoch:
                self._parts.pop(p, None)
                continue
            out.update(part.states)
        return out

    async def _append(
        self,
        part: _Partition,
        items: list[tuple[str, bytes]],
        changes: dict[str, tuple[bytes, int] | None] | None = None,
        batches: list[bytes] | None = None,
    ) -> None:
        """Append ``items`` (or ready ``batches``) to the partition with acks=all; apply
        ``changes`` to its states in memory as soon as they are appended (before the
        replicas have them). LogferryError if it was not appended or not replicated."""
        if batches is None:
            batches = [encode_records(items, int(time.time() * 1000))]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ProduceResult] = loop.create_future()

        def reply(result: ProduceResult) -> None:
            if not future.done():
                future.set_result(result)

        before = part.plog.end_offset
        sets = [MessageSet(TOPIC, part.partition, memoryview(b)) for b in batches]
        self.produce.produce(ProduceRequest(-1, sets, None), INTERNAL, reply)
        if part.plog.end_offset != before and changes:  # appended: memory follows the log
            for txn_id, change in changes.items():
                if change is None:
                    part.states.pop(txn_id, None)
                else:
                    part.states[txn_id] = change
        result = await future
        for answer in result.parts:
            if answer.error:
                error = error_for_code(answer.error, f"{TOPIC}-{part.partition}: {answer.message}")
                if isinstance(error, NotLeaderError):  # deposed meanwhile: the client finds the next one
                    self._parts.pop(part.partition, None)
                    raise TxnError(ErrorCode.not_coordinator, str(error))
                raise error

    def set_in_memory(self, transactional_id: str, value: bytes, version: int) -> bool:
        """Change the id's state in memory only, if it is at ``version`` (a Complete*
        state the next write stores: see the service's lazy completion)."""
        n = self.partitions()
        part = None if n is None else self._parts.get(partition_for(transactional_id, n))
        if part is None or part.states.get(transactional_id, (b"", -1))[1] != version:
            return False
        part.states[transactional_id] = (value, version)
        return True

    # -- snapshots ---------------------------------------------------------------------------

    async def maybe_snapshot(self) -> None:
        """Snapshot each loaded partition that grew past its threshold (module docstring)."""
        for p, part in list(self._parts.items()):
            plog = part.plog
            if part.snapshotting or plog.end_offset - plog.start_offset < max(
                self.snapshot_bytes, 2 * part.snapshot_bytes
            ):
                continue
            if self._led(p) is None:
                continue
            part.snapshotting = True
            try:
                start_message = plog.end_message
                batches = list(
                    snapshot_batches({i: raw for i, (raw, _) in part.states.items()}, int(time.time() * 1000))
                )
                if batches:
                    await self._append(part, [], batches=batches)
                part.snapshot_bytes = sum(len(b) for b in batches)
                plog.delete_records_before(start_message)
                log.info(
                    "%s-%d: snapshot of %d ids (%d bytes); the log now starts there",
                    TOPIC,
                    p,
                    len(part.states),
                    part.snapshot_bytes,
                )
            finally:
                part.snapshotting = False


__all__ = ["DEFAULT_PARTITIONS", "SNAPSHOT_BYTES", "TOPIC", "TxnStateLog"]
