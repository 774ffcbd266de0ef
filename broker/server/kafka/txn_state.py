"""A transactional id's state on its transaction coordinator, as Kafka keeps it (sans IO).

One :class:`TxnMetadata` per transactional id: the producer id and epoch it holds, the
state of its current transaction, the partitions and groups in it, its timeout and
when it last changed. The coordinator (:mod:`broker.server.kafka.txn_service`) applies
one of the transitions below to the state it holds and appends the new one to
``__transaction_state`` (:mod:`broker.server.kafka.txn_store`) with acks=all before it
answers, so the state survives a kill -9 and a move of the coordinator to another
broker. The transitions are Kafka's
(``TransactionCoordinator``, ``TransactionMetadata``)::

    Empty ──AddPartitions/AddOffsets──► Ongoing ──EndTxn(commit)──► PrepareCommit ─markers─► CompleteCommit
      ▲                                   │  └─────EndTxn(abort)──► PrepareAbort ──markers─► CompleteAbort
      │                                   └─timeout / InitProducerId─► PrepareAbort (epoch bumped: fenced)
      └────────────── InitProducerId (epoch + 1; a Complete* transaction starts over) ◄──────────┘

Every request names the producer id and epoch: another id is
INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED (the producer was
replaced by a newer InitProducerId, or its transaction timed out). A request that
arrives while markers are being written (Prepare*) gets CONCURRENT_TRANSACTIONS,
which clients retry. Errors are :class:`TxnError` carrying Kafka's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

MAX_EPOCH = 32766
"""Past this epoch a transactional id gets a new producer id at epoch 0 (Kafka's
``Short.MAX_VALUE - 1``)."""
MAX_TIMEOUT_MS = 900_000
"""The longest transaction timeout a producer may ask for (Kafka's
``transaction.max.timeout.ms`` default, 15 minutes)."""
STATE_VERSION = 1


class TxnState(str, Enum):  # noqa: UP042 - StrEnum's str() is the value, not Class.NAME
    """Where a transactional id's transaction is (Kafka's names)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        """Markers are being written: nothing else may happen to the transaction."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


class TxnError(Exception):
    """A request the state refuses, with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class TxnMetadata:
    """One transactional id's state, as stored in its record of ``__transaction_state``
    (:meth:`to_json`; ZooKeeper held the same JSON before)."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    """The partitions written in the current transaction: each gets a marker."""
    groups: set[str] = field(default_factory=set)
    """The groups whose offsets the transaction commits (AddOffsetsToTxn)."""
    started_ms: int = -1
    """When the first partition or group was added (the timeout runs from there); -1: no
    transaction."""
    updated_ms: int = 0
    """When the state last changed."""

    # -- transitions -----------------------------------------------------------------------

    def check_producer(self, producer_id: int, epoch: int) -> None:
        """TxnError unless ``(producer_id, epoch)`` is the id's current producer."""
        if producer_id != self.producer_id:
            raise TxnError(
                ErrorCode.invalid_producer_id_mapping,
                f"transactional id {self.transactional_id!r} belongs to producer id {self.producer_id}, "
                f"not {producer_id}",
            )
        if epoch < self.epoch:
            raise TxnError(
                ErrorCode.producer_fenced,
                f"producer {producer_id} epoch {epoch} of transactional id {self.transactional_id!r} is "
                f"fenced by epoch {self.epoch}: a newer producer initialised it, or its transaction timed out",
            )
        if epoch > self.epoch:
            raise TxnError(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} is newer than the coordinator's {self.epoch}",
            )

    def _check_not_preparing(self) -> None:
        if self.state.preparing:
            raise TxnError(
                ErrorCode.concurrent_transactions,
                f"transaction of {self.transactional_id!r} is completing ({self.state.value}): retry",
            )

    def add(
        self, producer_id: int, epoch: int, now_ms: int, partitions: set[tuple[str, int]], group: str | None
    ) -> None:
        """AddPartitionsToTxn (``partitions``) or AddOffsetsToTxn (``group``): the
        transaction is Ongoing with them in it."""
        self.check_producer(producer_id, epoch)
        self._check_not_preparing()
        if self.state is not TxnState.ONGOING:
            self.partitions, self.groups = set(), set()
            self.started_ms = now_ms
            self.state = TxnState.ONGOING
        self.partitions |= partitions
        if group is not None:
            self.groups.add(group)
        self.updated_ms = now_ms

    def end(self, producer_id: int, epoch: int, commit: bool, now_ms: int) -> bool:
        """EndTxn: True when markers are to be written (the state is now Prepare*);
        False when the same end already completed (a client's retry: answer success).
        TxnError for a fenced producer or a transaction in another state."""
        self.check_producer(producer_id, epoch)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if self.state is done:
            return False
        if self.state is preparing:
            raise TxnError(ErrorCode.concurrent_transactions, f"{self.transactional_id!r} is still {preparing.value}")
        if self.state is not TxnState.ONGOING:
            raise TxnError(
                ErrorCode.invalid_txn_state,
                f"cannot {'commit' if commit else 'abort'} transactional id {self.transactional_id!r} "
                f"in state {self.state.value}",
            )
        self.state = preparing
        self.updated_ms = now_ms
        return True

    def complete(self, now_ms: int) -> None:
        """Every marker is written: Complete*, no partition or group left."""
        if self.state is TxnState.PREPARE_COMMIT:
            self.state = TxnState.COMPLETE_COMMIT
        elif self.state is TxnState.PREPARE_ABORT:
            self.state = TxnState.COMPLETE_ABORT
        self.partitions, self.groups = set(), set()
        self.started_ms = -1
        self.updated_ms = now_ms

    def bump_epoch(self, new_producer_id: int | None) -> None:
        """The next epoch; past :data:`MAX_EPOCH`, ``new_producer_id`` at epoch 0."""
        if self.epoch >= MAX_EPOCH:
            if new_producer_id is None:
                raise ValueError("a new producer id is needed past the last epoch")
            self.producer_id, self.epoch = new_producer_id, 0
        else:
            self.epoch += 1

    def fence_and_abort(self, now_ms: int) -> None:
        """The transaction times out, or a new producer initialises the id while it is
        Ongoing: the epoch is bumped (the old producer is fenced) and the transaction
        aborted (markers with the new epoch)."""
        self.epoch = min(self.epoch + 1, MAX_EPOCH + 1)  # the next init takes a new id past MAX_EPOCH
        self.state = TxnState.PREPARE_ABORT
        self.updated_ms = now_ms

    def idle_for(self, now_ms: int, expiration_ms: int) -> bool:
        """Whether the id has had no transaction and no change for ``expiration_ms``
        (Kafka's ``transactional.id.expiration.ms``): it may be forgotten. Never while a
        transaction is Ongoing or its markers are being written."""
        idle = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return idle and now_ms - self.updated_ms >= expiration_ms

    def expired(self, now_ms: int) -> bool:
        """An Ongoing transaction older than its timeout."""
        return self.state is TxnState.ONGOING and now_ms - self.started_ms > self.timeout_ms

    # -- storage ---------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The stored value (JSON: a record's value in ``__transaction_state``, readable
        with ``logferry consume``; before it, a znode's)."""
        return json.dumps(
            {
                "v": STATE_VERSION,
                "producer_id": self.producer_id,
                "epoch": self.epoch,
                "timeout_ms": self.timeout_ms,
                "state": self.state.value,
                "partitions": sorted([t, p] for t, p in self.partitions),
                "groups": sorted(self.groups),
                "started_ms": self.started_ms,
                "updated_ms": self.updated_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, transactional_id: str, raw: bytes) -> TxnMetadata:
        """The state stored for ``transactional_id``; ValueError naming it if ``raw`` is not one."""
        try:
            value: dict[str, Any] = json.loads(raw)
            return cls(
                transactional_id,
                int(value["producer_id"]),
                int(value["epoch"]),
                int(value["timeout_ms"]),
                TxnState(value["state"]),
                {(str(t), int(p)) for t, p in value["partitions"]},
                {str(g) for g in value["groups"]},
                int(value["started_ms"]),
                int(value["updated_ms"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"stored state of transactional id {transactional_id!r} is not readable: {exc!r}"
            ) from None


def check_timeout(timeout_ms: int) -> None:
    """TxnError INVALID_TRANSACTION_TIMEOUT unless 0 < ``timeout_ms`` <= :data:`MAX_TIMEOUT_MS`."""
    if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
        raise TxnError(
            ErrorCode.invalid_transaction_timeout,
            f"transaction.timeout.ms {timeout_ms} is not in 1..{MAX_TIMEOUT_MS} (the broker's maximum)",
        )


__all__ = ["MAX_EPOCH", "MAX_TIMEOUT_MS", "TxnError", "TxnMetadata", "TxnState", "check_timeout"]
