"""The coordinator's state log around a real partition log (broker/server/kafka/txn_store.py),
with the produce service, the replicas and ZooKeeper stood in for: a state written is
what a new leader epoch replays; a stale version is refused; memory follows an append
at once; a broker that no longer leads the partition answers NOT_COORDINATOR; a snapshot
moves the log start and replays to the same states."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.coordination.transactions import StaleStateError
from broker.replication.roles import FOLLOWER, LEADER
from broker.server.kafka.txn_log import TOPIC, partition_for
from broker.server.kafka.txn_state import TxnError, TxnMetadata
from broker.server.kafka.txn_store import TxnStateLog
from broker.server.services.results import ProduceResult
from broker.storage.config import LogConfig
from broker.storage.partition_log import PartitionLog
from broker.wire import records
from broker.wire.produce import ProduceAnswerPart, ProduceRequest


class AppendingProduce:
    """Appends each set to its log and answers at once, as acks=all on one replica."""

    def __init__(self, logs: dict[int, PartitionLog]):
        self.logs = logs

    def produce(self, request: ProduceRequest, principal: Any, reply: Any) -> None:
        parts = []
        for topic, partition, data in request.sets:
            scan = records.validate_message_set(data)
            base = self.logs[partition].append(data, scan.messages)
            parts.append(ProduceAnswerPart(topic, partition, 0, base, None))
        reply(ProduceResult(parts, False))


class NoZooKeeper:
    """A ZooKeeper with no state from before the log."""

    def get_children(self, path: str) -> list[str]:
        return []


def make_store(tmp_path: Path, partitions: int = 2, **kwargs: Any) -> tuple[TxnStateLog, dict[int, Any]]:
    logs = {p: PartitionLog(tmp_path / f"{TOPIC}-{p}", TOPIC, p, LogConfig(), recover=False) for p in range(partitions)}
    replicas = {p: SimpleNamespace(role=LEADER, epoch=0, plog=logs[p]) for p in range(partitions)}
    view = SimpleNamespace(
        topics={TOPIC: {p: [1] for p in range(partitions)}}, leader=lambda t, p: 1, brokers={1: None}
    )
    store = TxnStateLog(
        1,
        lambda: view,
        lambda: {(TOPIC, p): r for p, r in replicas.items()},
        AppendingProduce(logs),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda: NoZooKeeper(),
        None,
        **kwargs,
    )
    return store, replicas


def state(txn_id: str, epoch: int) -> bytes:
    return TxnMetadata(txn_id, 5, epoch, 60_000, updated_ms=epoch).to_json()


def test_a_new_leader_epoch_replays_what_was_written(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, replicas = make_store(tmp_path)
        assert await store.get("a") is None
        version = await store.put("a", state("a", 0), None)
        version = await store.put("a", state("a", 1), version)
        await store.put("b", state("b", 0), None)
        assert await store.get("a") == (state("a", 1), version)
        with pytest.raises(StaleStateError):  # written over since that version
            await store.put("a", state("a", 9), version - 1)
        assert await store.forget("b", (await store.get("b"))[1])  # type: ignore[index]
        for replica in replicas.values():
            replica.epoch = 1  # led again: loaded again from the log
        got = await store.get("a")
        assert got is not None and got[0] == state("a", 1) and got[1] != version  # versions never reused
        assert await store.get("b") is None

    asyncio.run(scenario())


def test_a_broker_that_no_longer_leads_answers_not_coordinator(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, replicas = make_store(tmp_path)
        await store.put("a", state("a", 0), None)
        replicas[partition_for("a", 2)].role = FOLLOWER
        assert not store.leads("a")
        with pytest.raises(TxnError) as caught:
            await store.get("a")
        assert caught.value.code == ErrorCode.not_coordinator
        assert "a" not in store.loaded()

    asyncio.run(scenario())


def test_memory_follows_the_append_before_the_answer(tmp_path: Path) -> None:
    """Between the append and the replicas' answer, the state in memory is already the
    new one: a snapshot taken then (same event loop) holds it, never the older one."""

    async def scenario() -> None:
        store, _ = make_store(tmp_path)
        assert await store.get("a") is None  # its partition loaded
        held: list[asyncio.Future[None]] = []
        produce = store.produce
        original = produce.produce

        def slow(request: ProduceRequest, principal: Any, reply: Any) -> None:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            held.append(future)
            original(request, principal, lambda result: future.add_done_callback(lambda _: reply(result)))

        produce.produce = slow  # type: ignore[method-assign]
        task = asyncio.ensure_future(store.put("a", state("a", 0), None))
        await asyncio.sleep(0)
        assert store.loaded()["a"][0] == state("a", 0)  # appended, not yet answered
        held[0].set_result(None)
        await task

    asyncio.run(scenario())


def test_a_snapshot_moves_the_log_start_and_replays_alike(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, replicas = make_store(tmp_path, partitions=1, snapshot_bytes=4096)
        versions: dict[str, int | None] = {}
        for i in range(200):
            txn_id = f"id-{i % 7}"
            versions[txn_id] = await store.put(txn_id, state(txn_id, i), versions.get(txn_id))
        before = {i: raw for i, (raw, _) in store.loaded().items()}
        plog = replicas[0].plog
        assert plog.start_offset == 0
        await store.maybe_snapshot()
        assert plog.start_offset > 0 and plog.end_offset - plog.start_offset < 4096
        replicas[0].epoch = 1
        await store.load(0)
        assert {i: raw for i, (raw, _) in store.loaded().items()} == before

    asyncio.run(scenario())
