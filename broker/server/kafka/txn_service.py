"""Kafka's transaction coordinator: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (on the id's coordinator) and
TxnOffsetCommit (on the group's coordinator).

A transactional id's coordinator is, as in Kafka, the leader of the id's partition of
the internal topic ``__transaction_state``, where its state
(:class:`~broker.server.kafka.txn_state.TxnMetadata`) is kept
(:mod:`broker.server.kafka.txn_store`): each request applies a transition to the state
the coordinator holds in memory and appends the new state with acks=all before
answering, so a coordinator killed with -9 or moved to another broker leaves nothing
behind that the next one (the partition's next leader, which replays the partition)
cannot read. Within a broker one lock per id orders the requests. What the group
coordinators need of a transaction that commits offsets stays in ZooKeeper
(:mod:`broker.coordination.transactions`: the pending offsets and a mirror of the state).

Ending a transaction: the decision (PrepareCommit or PrepareAbort) is stored first;
then a COMMIT or ABORT marker goes into every partition of the
transaction (:class:`~broker.server.kafka.txn_markers.TxnMarkerWriter`), the group
offsets a commit carries become the groups' committed offsets (an abort drops them),
and the state is CompleteCommit or CompleteAbort. The client is answered once the
decision is stored, while the markers are written (the id's lock held until they are,
so its next request waits for them), or, for a transaction with group offsets, once
they are published; markers that cannot be written yet (a partition without a leader)
are retried by :meth:`KafkaTxnService.run_expiry` every second, which also aborts
transactions past their timeout (bumping the epoch, which fences their producer),
finishes those a dead coordinator left half way (found when the partition is loaded)
and snapshots the state partitions. Every :data:`FULL_SCAN_S` it also looks at every id
it coordinates and forgets those idle past ``transactional_id_expiration_ms`` (Kafka's
``transactional.id.expiration.ms``, 7 days): a tombstone in the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.common.acl import Operation
from broker.common.acl import group as group_resource
from broker.common.acl import transactional_id as txn_id_resource
from broker.common.errors import AuthorizationError, LogferryError
from broker.coordination import transactions as store
from broker.coordination.registry import ClusterView
from broker.server.kafka.errors import kafka_error
from broker.server.kafka.groups import coordinator_for
from broker.server.kafka.protocol import Api, Request, make, response_schema
from broker.server.kafka.txn_state import MAX_EPOCH, TxnError, TxnMetadata, TxnState, check_timeout
from broker.server.kafka.txn_store import TxnStateLog

log = logging.getLogger("logferry.kafka")
_NO_TIME = timedelta(0)
EXPIRY_INTERVAL_S = 1.0
"""How often the coordinator looks for transactions past their timeout and markers
left unwritten."""
FULL_SCAN_S = 30.0
"""How often the expiry round looks at every transactional id this broker coordinates
(for idle ones); between scans only at the ids it knows to be Ongoing or unfinished."""
LAZY_COMPLETE_S = 1.0
"""How long after an EndTxn the expiry round stores its Complete* state if no request
of the id came meanwhile (one came: its own write stored it)."""
MARKER_TIMEOUT_S = 10.0
"""How long an EndTxn waits for its markers before answering anyway (the decision is
stored; the markers are retried in the background)."""
_FENCED_SINCE = {Api.INIT_PRODUCER_ID: 4, Api.ADD_PARTITIONS_TO_TXN: 2, Api.ADD_OFFSETS_TO_TXN: 2, Api.END_TXN: 2}
"""Versions from which PRODUCER_FENCED is sent; older clients get INVALID_PRODUCER_EPOCH
(Kafka's own down-conversion: they do not know the newer code)."""


class MarkerWriter(Protocol):
    """Writes a transaction's markers (:mod:`broker.server.kafka.txn_markers`)."""

    async def write(self, partitions: set[tuple[str, int]], producer_id: int, epoch: int, commit: bool) -> None:
        """A COMMIT or ABORT marker in each partition, replicated; a LogferryError if one
        could not be written (the caller retries all: a marker written twice is harmless)."""


class OffsetCommitter(Protocol):
    """Writes a group's committed offsets as OffsetCommit does (the group service)."""

    async def commit_offsets(self, group: str, offsets: list[tuple[str, int, int]]) -> None: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class KafkaTxnService:
    """Answers the transaction apis; coordinates the transactional ids that hash here."""

    def __init__(
        self,
        broker_id: int,
        view: Callable[[], ClusterView],
        zk_client: Callable[[], Any],
        pool: Any,
        allocate_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter,
        offsets: OffsetCommitter,
        authorizer: Any = None,
        expiration_ms: int = 7 * 24 * 3600 * 1000,
        state_log: TxnStateLog | None = None,
    ):
        self.broker_id = broker_id
        self.view = view
        self.zk_client = zk_client
        self.pool = pool
        self.allocate_producer_id = allocate_producer_id
        self.markers = markers
        self.offsets = offsets
        self.authorizer = authorizer
        """None: allow all. Otherwise ``produce`` on the transactional id (Kafka's WRITE
        on the TransactionalId) for every request of a transaction, ``produce`` on each
        topic added, ``consume`` on a group whose offsets are committed (the rights a
        producer and a consumer need anyway)."""
        if state_log is None:
            raise ValueError("the transaction coordinator needs its state log")
        self.state_log = state_log
        """The ids' states (``__transaction_state``)."""
        state_log.on_load = self._loaded
        self._locks: dict[str, asyncio.Lock] = {}
        self._due: dict[str, int] = {}
        """Transactional id -> when (ms) its Ongoing transaction times out (0: markers to
        finish), for the ids this broker coordinates."""
        self._next_scan = 0.0
        self.expiration_ms = expiration_ms
        """Idle transactional ids are forgotten after this long (found by the full scans)."""
        self._scan_s = min(FULL_SCAN_S, expiration_ms / 3000)
        self._ending: set[asyncio.Task[None]] = set()
        """EndTxn tasks writing their markers (a reference: the loop keeps weak ones)."""
        self._unstored: dict[str, int] = {}
        """Transactional id -> version of a Prepare* state whose markers and group
        offsets this broker finished, made Complete* in memory without storing it (an
        EndTxn's transaction): the next write of the id (the next transaction's first
        request, or the expiry round after :data:`LAZY_COMPLETE_S`) stores it, saving a
        write per transaction. If this broker dies first, or stops leading the id's
        partition, the next coordinator finds Prepare* and finishes it again: markers
        and offsets written twice change nothing."""

    def handlers(self) -> dict[Api, Callable[[Request, Any], Coroutine[Any, Any, Any]]]:
        """Api key -> handler, for :class:`~broker.server.kafka.service.KafkaService`."""
        return {
            Api.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            Api.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            Api.END_TXN: self.end_txn,
            Api.TXN_OFFSET_COMMIT: self.txn_offset_commit,
        }

    # -- plumbing --------------------------------------------------------------------------

    def group_coordinator_id(self, group: str) -> int:
        """The broker that coordinates ``group`` (TxnOffsetCommit goes there)."""
        view = self.view()
        return coordinator_for(group, [b for b, i in view.brokers.items() if i.kafka_port])

    async def find_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator for a transactional id: the leader of its partition of
        ``__transaction_state``, which is created first if need be (-1: no leader yet)."""
        await self.state_log.ensure_topic()
        return self.state_log.coordinator(transactional_id)

    def _loaded(self, states: dict[str, bytes]) -> None:
        """A state partition was loaded: note its ids due for a timeout or unfinished markers."""
        for txn_id, raw in states.items():
            try:
                self._note(TxnMetadata.from_json(txn_id, raw))
            except ValueError as exc:
                log.warning("%s", exc)

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            if len(self._locks) > 10_000:  # forget idle ids' locks
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _zk(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def _load(self, transactional_id: str) -> tuple[TxnMetadata, int] | None:
        """The id's state and version (TxnError NOT_COORDINATOR unless it is coordinated
        here; None if it has none)."""
        found = await self.state_log.get(transactional_id)
        if found is None:
            return None
        raw, version = found
        return TxnMetadata.from_json(transactional_id, raw), version

    async def _store(self, meta: TxnMetadata, version: int | None) -> int:
        """Store the id's state if still at ``version``; its new version."""
        txn_id = meta.transactional_id
        new = await self.state_log.put(txn_id, meta.to_json(), version)
        self._unstored.pop(txn_id, None)  # stored: nothing left to complete
        self._note(meta)
        return new

    def _note(self, meta: TxnMetadata) -> None:
        """Remember when the expiry round must look at the id (it looks only at these,
        and at every id at a full scan)."""
        if meta.state is TxnState.ONGOING:
            self._due[meta.transactional_id] = meta.started_ms + meta.timeout_ms
        elif meta.state.preparing:
            self._due[meta.transactional_id] = 0
        else:
            self._due.pop(meta.transactional_id, None)

    def _check(self, transactional_id: str, api: Api) -> None:
        """TxnError NOT_COORDINATOR unless this broker coordinates the id (leads its
        partition of ``__transaction_state``)."""
        if not self.state_log.leads(transactional_id):
            raise TxnError(
                ErrorCode.not_coordinator, f"broker {self.broker_id} does not coordinate {transactional_id!r}"
            )

    def _denied(
        self, principal: Any, operation: Operation, topics: list[str], group: str | None = None, txn: str | None = None
    ) -> None:
        """TxnError with the authorization code unless ``principal`` may use the
        transactional id ``txn`` (``produce``), and do ``operation`` on the group and topics."""
        if self.authorizer is None:
            return
        try:
            if txn is not None:
                self.authorizer.check(principal, Operation.PRODUCE, txn_id_resource(txn))
            if group is not None:
                self.authorizer.check(principal, operation, group_resource(group))
            for topic in topics:
                self.authorizer.check_topic(principal, operation, topic)
        except AuthorizationError as exc:
            raise TxnError(kafka_error(exc), str(exc)) from None

    async def _finish(self, meta: TxnMetadata, version: int, lazy: bool = False) -> int:
        """Write the markers of a Prepare* transaction, publish (commit) or drop (abort)
        its group offsets, store it Complete*; the new version. ``lazy``: leave the
        Complete* state to the id's next write (see ``_unstored``); the version is then
        unchanged. LogferryError if a marker or ZooKeeper write failed: the state stays
        Prepare* (retried)."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        if meta.groups:  # TxnOffsetCommit needs its group in the transaction: none without
            mirror = store.as_mirror(meta.to_json())
            await self._zk(lambda: store.mark_end(self.zk_client(), meta.transactional_id, mirror))
        if meta.partitions:
            await self.markers.write(meta.partitions, meta.producer_id, meta.epoch, commit)
        if meta.groups:
            pending = await self._zk(lambda: store.read_pending_offsets(self.zk_client(), meta.transactional_id))
            if commit:
                for group, offsets in pending.items():
                    await self.offsets.commit_offsets(group, offsets)
            if pending:
                await self._zk(lambda: store.delete_pending_offsets(self.zk_client(), meta.transactional_id))
        meta.complete(_now_ms())
        if lazy and self.state_log.set_in_memory(meta.transactional_id, meta.to_json(), version):
            self._unstored[meta.transactional_id] = version
            self._due[meta.transactional_id] = _now_ms() + int(LAZY_COMPLETE_S * 1000)
            return version
        return await self._store(meta, version)

    @staticmethod
    def _code(error: TxnError, api: Api, version: int) -> ErrorCode:
        if error.code == ErrorCode.producer_fenced and version < _FENCED_SINCE.get(api, 0):
            return ErrorCode.invalid_producer_epoch
        return error.code

    async def _guard(self, api: Api, version: int, work: Callable[[], Awaitable[None]]) -> tuple[ErrorCode, str | None]:
        """Run ``work``; its error as Kafka's code and a message (a state changed under
        us: CONCURRENT_TRANSACTIONS; a failed append or ZooKeeper trouble:
        COORDINATOR_NOT_AVAILABLE; both retriable)."""
        try:
            await work()
        except TxnError as exc:
            return self._code(exc, api, version), str(exc)
        except store.StaleStateError as exc:
            return ErrorCode.concurrent_transactions, str(exc)
        except LogferryError as exc:
            log.warning("transaction request %s failed: %s", api.name, exc)
            return ErrorCode.coordinator_not_available, str(exc)
        return ErrorCode.none, None

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(
        self, request: Request, principal: Any, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: ``(error, producer id, epoch)``. A new
        id gets a producer id from the cluster's id blocks at epoch 0; a known one its
        producer id at the next epoch, which fences the previous producer. A
        transaction it left Ongoing is aborted first (markers with the new epoch)."""
        result: list[tuple[int, int]] = []

        async def work() -> None:
            self._check(transactional_id, Api.INIT_PRODUCER_ID)
            self._denied(principal, Operation.PRODUCE, [], txn=transactional_id)
            check_timeout(timeout_ms)
            now = _now_ms()
            loaded = await self._load(transactional_id)
            if loaded is None:
                meta = TxnMetadata(transactional_id, await self.allocate_producer_id(), 0, timeout_ms, updated_ms=now)
                await self._store(meta, None)
                result.append((meta.producer_id, meta.epoch))
                return
            meta, version = loaded
            if producer_id >= 0 and (producer_id, epoch) != (meta.producer_id, meta.epoch):
                raise TxnError(
                    ErrorCode.producer_fenced,
                    f"producer {producer_id} epoch {epoch} is not the current one of {transactional_id!r} "
                    f"({meta.producer_id} epoch {meta.epoch})",
                )
            if meta.state is TxnState.ONGOING:
                meta.fence_and_abort(now)
                version = await self._store(meta, version)
            if meta.state.preparing:
                version = await self._finish(meta, version)
            if meta.epoch >= MAX_EPOCH:
                meta.bump_epoch(await self.allocate_producer_id())
            else:
                meta.bump_epoch(None)
            meta.state, meta.timeout_ms, meta.updated_ms = TxnState.EMPTY, timeout_ms, _now_ms()
            await self._store(meta, version)
            result.append((meta.producer_id, meta.epoch))

        async with self._lock(transactional_id):
            error, message = await self._guard(Api.INIT_PRODUCER_ID, request.version, work)
        if error != ErrorCode.none:
            log.info("InitProducerId for %r: %s (%s)", transactional_id, error.name, message)
            return error, -1, -1
        return ErrorCode.none, *result[0]

    # -- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------

    async def add_partitions_to_txn(self, request: Request, channel: Any) -> Any:
        """Put partitions in the transaction (each gets a marker when it ends)."""
        body = request.body
        v = request.version
        txn_id = body.v3_and_below_transactional_id
        wanted = {(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions}
        unknown: set[tuple[str, int]] = set()

        async def work() -> None:
            self._check(txn_id, Api.ADD_PARTITIONS_TO_TXN)
            self._denied(channel.principal, Operation.PRODUCE, sorted({t for t, _ in wanted}), txn=txn_id)
            topics = self.view().topics
            unknown.update(k for k in wanted if k[1] not in topics.get(k[0], {}))
            if unknown:
                raise TxnError(ErrorCode.unknown_topic_or_partition, f"unknown partitions {sorted(unknown)}")
            async with self._lock(txn_id):
                loaded = await self._load(txn_id)
                if loaded is None:
                    raise TxnError(ErrorCode.invalid_producer_id_mapping, f"unknown transactional id {txn_id!r}")
                meta, version = loaded
                meta.add(body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, _now_ms(), wanted, None)
                await self._store(meta, version)

        error, _ = await self._guard(Api.ADD_PARTITIONS_TO_TXN, v, work)
        part_cls = response_schema(Api.ADD_PARTITIONS_TO_TXN, v, "AddPartitionsToTxnPartitionResult")
        topic_cls = response_schema(Api.ADD_PARTITIONS_TO_TXN, v, "AddPartitionsToTxnTopicResult")

        def code(key: tuple[str, int]) -> ErrorCode:
            if error == ErrorCode.unknown_topic_or_partition:  # Kafka: the others were not tried
                return error if key in unknown else ErrorCode.operation_not_attempted
            return error

        return make(
            response_schema(Api.ADD_PARTITIONS_TO_TXN, v),
            throttle_time=_NO_TIME,
            error_code=ErrorCode.none,
            results_by_topic_v3_and_below=tuple(
                make(
                    topic_cls,
                    name=t.name,
                    results_by_partition=tuple(
                        make(part_cls, partition_index=p, partition_error_code=code((t.name, int(p))))
                        for p in t.partitions
                    ),
                )
                for t in body.v3_and_below_topics
            ),
        )

    async def add_offsets_to_txn(self, request: Request, channel: Any) -> Any:
        """Put a group's offsets in the transaction (TxnOffsetCommit sends them to the
        group's coordinator; they become the group's on commit)."""
        body = request.body

        async def work() -> None:
            self._check(body.transactional_id, Api.ADD_OFFSETS_TO_TXN)
            self._denied(channel.principal, Operation.CONSUME, [], body.group_id, txn=body.transactional_id)
            async with self._lock(body.transactional_id):
                loaded = await self._load(body.transactional_id)
                if loaded is None:
                    raise TxnError(
                        ErrorCode.invalid_producer_id_mapping, f"unknown transactional id {body.transactional_id!r}"
                    )
                meta, version = loaded
                meta.add(body.producer_id, body.producer_epoch, _now_ms(), set(), body.group_id)
                await self._store(meta, version)
                # what TxnOffsetCommit checks, on the group's coordinator
                mirror = store.as_mirror(meta.to_json())
                await self._zk(lambda: store.write_mirror(self.zk_client(), body.transactional_id, mirror))

        error, _ = await self._guard(Api.ADD_OFFSETS_TO_TXN, request.version, work)
        return make(response_schema(Api.ADD_OFFSETS_TO_TXN, request.version), throttle_time=_NO_TIME, error_code=error)

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_txn(self, request: Request, channel: Any) -> Any:
        """Commit or abort: answered once the decision (Prepare*) is stored, as Kafka
        answers; the markers follow in :meth:`_end`'s task, which holds the id's lock
        until they are written (or :data:`MARKER_TIMEOUT_S` passed: then retried in the
        background). The client's next request of the id (the next transaction's
        AddPartitionsToTxn) so waits for them on the lock, where Kafka answers
        CONCURRENT_TRANSACTIONS and librdkafka retries some 20 ms later; and no batch of
        the next transaction reaches a partition before its marker (a partition takes
        the producer's batches only once AddPartitionsToTxn answered). A transaction
        with group offsets is answered once they are the groups' committed offsets, as
        before: a client that reads offsets without ``require_stable`` (an older one, or
        a read_uncommitted one) then sees them."""
        loop = asyncio.get_running_loop()
        decided: asyncio.Future[ErrorCode] = loop.create_future()
        task = loop.create_task(self._end(request, channel.principal, decided), name="kafka-end-txn")
        self._ending.add(task)
        task.add_done_callback(self._ended)
        error = await decided  # cancelled (the connection closed): the task goes on
        return make(response_schema(Api.END_TXN, request.version), throttle_time=_NO_TIME, error_code=error)

    async def _end(self, request: Request, principal: Any, decided: asyncio.Future[ErrorCode]) -> None:
        """EndTxn's work: under the id's lock, store the decision, set ``decided`` (the
        answer goes out), then write the markers (group offsets: before ``decided``)."""
        body = request.body
        txn_id = body.transactional_id
        prepared: list[tuple[TxnMetadata, int]] = []

        async def work() -> None:
            self._check(txn_id, Api.END_TXN)
            self._denied(principal, Operation.PRODUCE, [], txn=txn_id)
            loaded = await self._load(txn_id)
            if loaded is None:
                raise TxnError(ErrorCode.invalid_producer_id_mapping, f"unknown transactional id {txn_id!r}")
            meta, version = loaded
            if not meta.end(body.producer_id, body.producer_epoch, body.committed, _now_ms()):
                return  # a retry of an end that completed
            prepared.append((meta, await self._store(meta, version)))

        try:
            async with self._lock(txn_id):
                error, _ = await self._guard(Api.END_TXN, request.version, work)
                if prepared and prepared[0][0].groups:  # group offsets: published before the answer
                    await self._finish_ended(*prepared.pop())
                if not decided.done():
                    decided.set_result(error)
                if prepared:
                    await asyncio.sleep(0)  # the answer is written first (a local marker needs no turn)
                    await self._finish_ended(*prepared.pop())
        finally:
            if not decided.done():  # cancelled (the broker stops) before the decision
                decided.set_result(ErrorCode.coordinator_not_available)

    async def _finish_ended(self, meta: TxnMetadata, version: int) -> None:
        """:meth:`_finish` for EndTxn, bounded by :data:`MARKER_TIMEOUT_S` (what is not
        written by then the expiry round writes)."""
        try:
            async with asyncio.timeout(MARKER_TIMEOUT_S):
                await self._finish(meta, version, lazy=True)
        except (LogferryError, TimeoutError) as exc:
            log.warning("markers of %r not all written yet (retried): %s", meta.transactional_id, exc)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """An EndTxn task ended: forget it; a crash (a bug: errors are answered) is logged."""
        self._ending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ending a transaction failed", exc_info=task.exception())

    # -- TxnOffsetCommit ---------------------------------------------------------------------

    async def txn_offset_commit(self, request: Request, channel: Any) -> Any:
        """On the group's coordinator: keep the offsets beside the transaction's state
        until it ends (:func:`broker.coordination.transactions.write_pending_offsets`)."""
        body = request.body
        v = request.version
        offsets = [(t.name, int(p.partition_index), int(p.committed_offset)) for t in body.topics for p in t.partitions]

        async def work() -> None:
            if self.group_coordinator_id(body.group_id) != self.broker_id:
                raise TxnError(
                    ErrorCode.not_coordinator, f"broker {self.broker_id} does not coordinate {body.group_id!r}"
                )
            self._denied(
                channel.principal,
                Operation.CONSUME,
                sorted({t for t, _, _ in offsets}),
                body.group_id,
                txn=body.transactional_id,
            )
            # first the count of ended transactions, then the state: if this one ends
            # after we saw it Ongoing, the count moves and the write below fails
            ends = await self._zk(lambda: store.end_count(self.zk_client(), body.transactional_id))
            # the state as its coordinator mirrored it when the group joined the
            # transaction (or the transaction ended)
            found = await self._zk(lambda: store.read_state(self.zk_client(), body.transactional_id))
            if found is None:
                raise TxnError(
                    ErrorCode.invalid_txn_state,
                    f"no transaction of {body.transactional_id!r} holds group {body.group_id!r} "
                    f"(AddOffsetsToTxn first)",
                )
            meta = TxnMetadata.from_json(body.transactional_id, found[0])
            meta.check_producer(body.producer_id, body.producer_epoch)
            if meta.state is not TxnState.ONGOING or body.group_id not in meta.groups:
                raise TxnError(
                    ErrorCode.invalid_txn_state,
                    f"group {body.group_id!r} is not in an ongoing transaction of {body.transactional_id!r} "
                    f"(AddOffsetsToTxn first)",
                )
            await self._zk(
                lambda: store.write_pending_offsets(
                    self.zk_client(), body.transactional_id, body.group_id, meta.producer_id, meta.epoch, offsets, ends
                )
            )

        error, _ = await self._guard(Api.TXN_OFFSET_COMMIT, v, work)
        if error == ErrorCode.producer_fenced and v < 3:
            error = ErrorCode.invalid_producer_epoch
        part_cls = response_schema(Api.TXN_OFFSET_COMMIT, v, "TxnOffsetCommitResponsePartition")
        topic_cls = response_schema(Api.TXN_OFFSET_COMMIT, v, "TxnOffsetCommitResponseTopic")
        return make(
            response_schema(Api.TXN_OFFSET_COMMIT, v),
            throttle_time=_NO_TIME,
            topics=tuple(
                make(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        make(part_cls, partition_index=p.partition_index, error_code=error) for p in t.partitions
                    ),
                )
                for t in body.topics
            ),
        )

    # -- timeouts and unfinished markers -----------------------------------------------------

    async def _forget(self, meta: TxnMetadata, version: int) -> None:
        """Forget an id idle past :attr:`expiration_ms` (Kafka's transactional id
        expiration): a tombstone in the log, unless it changed since it was read; then
        its znodes, if a transaction with offsets left any."""
        txn_id = meta.transactional_id
        try:
            if not await self.state_log.forget(txn_id, version):
                return
            await self._zk(lambda: store.delete_mirror(self.zk_client(), txn_id))
        except LogferryError as exc:
            log.info("transactional id %r not wholly forgotten (next scan): %s", txn_id, exc)
            return
        self._unstored.pop(txn_id, None)
        log.info("transactional id %r idle for %d ms: forgotten", txn_id, self.expiration_ms)

    async def run_expiry(self) -> None:
        """Every :data:`EXPIRY_INTERVAL_S` until cancelled: abort the transactions coordinated
        here that passed their timeout, and finish those left Prepare* (markers that could
        not be written, or a coordinator that died half way)."""
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL_S)
            try:
                await self.expire_once()
            except LogferryError as exc:
                log.warning("transaction expiry round failed (next in %.0f s): %s", EXPIRY_INTERVAL_S, exc)

    async def expire_once(self) -> None:
        """One round of :meth:`run_expiry`: load the state partitions this broker has come
        to lead (their ids due are noted then); the ids due; every :data:`FULL_SCAN_S`
        every id it coordinates (the idle ones are forgotten); then the snapshots."""
        for partition in self.state_log.led_partitions():
            try:
                await self.state_log.load(partition)
            except (TxnError, LogferryError) as exc:
                log.warning("transaction state partition %d not loaded (next round): %s", partition, exc)
        now = _now_ms()
        full = time.monotonic() >= self._next_scan
        if full:
            self._next_scan = time.monotonic() + self._scan_s
            ids = list(self.state_log.loaded())
        else:
            ids = [txn_id for txn_id, due in self._due.items() if due <= now]
        for txn_id in ids:
            async with self._lock(txn_id):
                try:
                    loaded = await self._load(txn_id)
                except TxnError:  # no longer coordinated here
                    loaded = None
                if loaded is None:
                    self._due.pop(txn_id, None)
                    self._unstored.pop(txn_id, None)
                    continue
                meta, version = loaded
                self._note(meta)
                if self._unstored.get(txn_id) == version:  # finished here: store Complete*
                    try:
                        version = await self._store(meta, version)
                    except LogferryError as exc:
                        log.warning("transaction of %r not stored complete yet (retried): %s", txn_id, exc)
                        continue
                if full and meta.idle_for(_now_ms(), self.expiration_ms):
                    await self._forget(meta, version)
                    continue
                try:
                    if meta.expired(_now_ms()):
                        log.info("transaction of %r passed its %d ms timeout: aborting", txn_id, meta.timeout_ms)
                        meta.fence_and_abort(_now_ms())
                        version = await self._store(meta, version)
                    if meta.state.preparing:
                        await self._finish(meta, version)
                except (LogferryError, TimeoutError) as exc:
                    log.warning("transaction of %r not finished yet (retried): %s", txn_id, exc)
        try:
            await self.state_log.maybe_snapshot()
        except LogferryError as exc:
            log.warning("transaction state snapshot failed (next round): %s", exc)


__all__ = ["KafkaTxnService", "MarkerWriter", "OffsetCommitter"]
