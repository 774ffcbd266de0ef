"""Idempotent producers' state in one partition: which batches it already holds.

Each magic 2 batch carries ``(producer_id, epoch, base_sequence)``
(:mod:`broker.wire.records`). Per producer id the partition remembers the epoch and
the sequence ranges and offsets of its last :data:`REMEMBERED_BATCHES` batches (as
Kafka does). A produced batch is then, before it is appended (:meth:`ProducerStateTable.check`):

* a **duplicate** of a remembered batch (same epoch and sequence range): not appended
  again; the leader answers with the offset it was appended at the first time (a set
  whose leading batches are held and whose others are new: only the new ones are
  appended, and the answer names the first held batch's offset);
* the **next** batch (its base sequence follows the producer's last one): appended;
* a **gap**: :class:`OutOfOrderSequenceError`, nothing appended;
* from an **older epoch**: :class:`ProducerFencedError`, nothing appended;
* from a **newer epoch** of a known producer: it must start at sequence 0;
* from an **unknown producer** (new, or one whose state retention dropped): appended.

Every appended batch is recorded (:meth:`ProducerStateTable.record`), on the leader
and on followers alike, so a follower that becomes leader deduplicates as its old
leader did. The table is rebuilt from the log on load (a snapshot plus the batches
after it), and snapshots are bytes (:meth:`~ProducerStateTable.to_bytes`) so this module
does no IO. Work is per batch, never per message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgpack

from broker.common.errors import OutOfOrderSequenceError, ProducerFencedError
from broker.storage.txn_index import TxnIndex
from broker.wire.records import NO_PRODUCER, SEQUENCE_MODULUS, TXN_DATA, ProducerInfo, TxnInfo

REMEMBERED_BATCHES = 5
"""Batches remembered per producer: a retry of any of them is recognised (Kafka's 5)."""
MAX_PRODUCERS = 10_000
"""Producers remembered per partition; past it the one that wrote least recently is
forgotten (short-lived producers, each with a new id, must not grow the table forever)."""
SNAPSHOT_VERSION = 1


class BatchMeta(NamedTuple):
    """One remembered batch of a producer."""

    first: int
    """Its base sequence."""
    last: int
    """Its last sequence (base + count - 1, wrapped)."""
    offset: int
    """Where it was appended."""


class ProducerEntry:
    """What the partition knows of one producer id."""

    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches: deque[BatchMeta] = deque(maxlen=REMEMBERED_BATCHES)

    @property
    def last_offset(self) -> int:
        """Offset of its newest remembered batch (-1 if none)."""
        return self.batches[-1].offset if self.batches else -1


def last_sequence(base: int, count: int) -> int:
    """The sequence of a batch's last message."""
    return (base + count - 1) % SEQUENCE_MODULUS


class ProducerStateTable:
    """Per producer id: epoch and last batches, for one partition (sans IO)."""

    def __init__(self, name: str = ""):
        self.name = name
        """The partition's name, for error messages."""
        self.producers: dict[int, ProducerEntry] = {}
        self.txns = TxnIndex()
        """Kafka transactions open and aborted here (:mod:`broker.storage.txn_index`)."""

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, infos: Sequence[ProducerInfo], base_offset: int, strict: bool = True) -> Held | None:
        """Decide on a produced message set whose magic 2 batches are ``infos``.

        Returns None to append it all, or :class:`Held` when its first batches are
        already in the log (a producer's retry): those are not appended again. Only a
        leading run of batches can be held (a producer sends its batches in order; a
        new leader may hold the first batches of a set its old leader appended but not
        the last ones). Raises OutOfOrderSequenceError for a gap, or for a held batch
        after a new one, and ProducerFencedError for an older epoch.
        ``base_offset`` (where the set would go) is only for messages.

        Not ``strict``: the set is a copy of batches another log holds (the mirror's),
        which may start anywhere or skip what retention deleted there. Held leading
        batches are still found; nothing is refused.
        """
        if not strict:
            try:
                return self.check(infos, base_offset)
            except (OutOfOrderSequenceError, ProducerFencedError):
                return self._held_prefix(infos)
        held: Held | None = None
        leading = True  # still in the set's leading run of held batches
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence) so far
        for info in infos:
            pid = info.producer_id
            if pid == NO_PRODUCER:
                leading = False
                continue
            seen = pending.get(pid)
            if seen is not None:
                epoch, prev = seen
                if not (
                    info.epoch == epoch
                    and info.base_sequence == (prev + 1) % SEQUENCE_MODULUS
                    or info.epoch > epoch
                    and info.base_sequence == 0
                ):
                    raise OutOfOrderSequenceError(
                        f"producer {pid}'s batches in one message set to partition {self.name} "
                        f"are not consecutive; nothing was appended"
                    )
            else:
                entry = self.producers.get(pid)
                if entry is not None:
                    at = self._check_one(entry, info, base_offset)
                    if at is not None:
                        held_end = 0 if held is None else held.nbytes
                        if not leading or info.position != held_end:
                            raise OutOfOrderSequenceError(
                                f"a message set to partition {self.name} holds a batch of "
                                f"producer {pid} that the log already has after batches it "
                                f"does not have; nothing was appended"
                            )
                        held = Held(
                            at if held is None else held.offset,
                            info.position + info.size,
                            (0 if held is None else held.messages) + info.count,
                            (0 if held is None else held.batches) + 1,
                        )
                        continue
            leading = False
            pending[pid] = (info.epoch, last_sequence(info.base_sequence, info.count))
        return held

    def _held_prefix(self, infos: Sequence[ProducerInfo]) -> Held | None:
        """The leading run of batches this log holds (same producer, epoch, sequences)."""
        held: Held | None = None
        for info in infos:
            entry = self.producers.get(info.producer_id)
            at = None
            if (
                entry is not None
                and info.epoch == entry.epoch
                and info.position == (0 if held is None else held.nbytes)
            ):
                last = last_sequence(info.base_sequence, info.count)
                at = next((b.offset for b in entry.batches if b.first == info.base_sequence and b.last == last), None)
            if at is None:
                break
            held = Held(
                at if held is None else held.offset,
                info.position + info.size,
                (0 if held is None else held.messages) + info.count,
                (0 if held is None else held.batches) + 1,
            )
        return held

    def _check_one(self, entry: ProducerEntry, info: ProducerInfo, base_offset: int) -> int | None:
        """The first batch of its producer in a set: the offset it is held at, None to
        append it, or raise."""
        pid = info.producer_id
        if info.epoch < entry.epoch:
            raise ProducerFencedError(
                f"producer {pid} epoch {info.epoch} is fenced in partition {self.name}: "
                f"epoch {entry.epoch} already wrote there; this producer was replaced and "
                f"must stop (or start over with a new producer id)"
            )
        if info.epoch > entry.epoch:
            if info.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} starts epoch {info.epoch} in partition {self.name} at "
                    f"sequence {info.base_sequence}, not 0; nothing was appended"
                )
            return None
        last = last_sequence(info.base_sequence, info.count)
        for batch in entry.batches:
            if batch.first == info.base_sequence and batch.last == last:
                return batch.offset
        if entry.batches:
            expected = (entry.batches[-1].last + 1) % SEQUENCE_MODULUS
            if info.base_sequence != expected:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {info.epoch} sent sequence {info.base_sequence} to "
                    f"partition {self.name} at offset {base_offset}, which expects {expected}: "
                    f"a batch before it is missing; nothing was appended"
                )
        return None

    def record(self, infos: Iterable[ProducerInfo], base_offset: int) -> None:
        """Remember appended batches (``infos`` of a message set appended at ``base_offset``)."""
        producers = self.producers
        for info in infos:
            pid = info.producer_id
            if pid == NO_PRODUCER:
                continue
            entry = producers.get(pid)
            if entry is None and len(producers) >= MAX_PRODUCERS:
                del producers[min(producers, key=lambda p: producers[p].last_offset)]
            if entry is None or info.epoch > entry.epoch:
                entry = producers[pid] = ProducerEntry(info.epoch)
            elif info.epoch < entry.epoch:
                continue  # a fenced writer's batch (copied from elsewhere): not its state
            entry.batches.append(
                BatchMeta(
                    info.base_sequence, last_sequence(info.base_sequence, info.count), base_offset + info.position
                )
            )

    def record_txns(self, txns: Iterable[TxnInfo], base_offset: int) -> None:
        """Note the transactional batches of a set appended at ``base_offset``
        (:attr:`txns`); a marker from a newer epoch fences the producer's older one here,
        as Kafka's markers do (its next batch starts that epoch at sequence 0)."""
        txns = list(txns)
        self.txns.record(txns, base_offset)
        for txn in txns:
            if txn.control == TXN_DATA:
                continue
            entry = self.producers.get(txn.producer_id)
            if entry is None or txn.epoch > entry.epoch:
                self.producers[txn.producer_id] = ProducerEntry(txn.epoch)

    def expire_before(self, offset: int) -> int:
        """Forget producers whose newest batch lies before ``offset`` (retention deleted
        it, as Kafka does); returns how many were dropped."""
        self.txns.expire_before(offset)
        gone = [pid for pid, e in self.producers.items() if e.last_offset < offset and pid not in self.txns.open]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was cut there)."""
        self.txns.truncate_to(offset)
        for pid in list(self.producers):
            entry = self.producers[pid]
            while entry.batches and entry.batches[-1].offset >= offset:
                entry.batches.pop()
            if not entry.batches:
                del self.producers[pid]

    # -- snapshots -----------------------------------------------------------------------

    def to_bytes(self, offset: int) -> bytes:
        """A snapshot of the table valid for the log up to ``offset``."""
        data: bytes = msgpack.packb(
            {
                "v": SNAPSHOT_VERSION,
                "offset": offset,
                "producers": [[pid, e.epoch, [list(b) for b in e.batches]] for pid, e in self.producers.items()],
                "txns": self.txns.to_state(),
            },
            use_bin_type=True,
        )
        return data

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "") -> tuple[ProducerStateTable, int]:
        """The table and offset of a snapshot; ValueError if it is not one."""
        try:
            snap = msgpack.unpackb(data, raw=False, strict_map_key=False)
            if snap.get("v") != SNAPSHOT_VERSION:
                raise ValueError(f"snapshot version {snap.get('v')!r}")
            table = cls(name)
            for pid, epoch, batches in snap["producers"]:
                entry = table.producers[int(pid)] = ProducerEntry(int(epoch))
                for first, last, at in batches:
                    entry.batches.append(BatchMeta(int(first), int(last), int(at)))
            table.txns = TxnIndex.from_state(snap.get("txns"))
            return table, int(snap["offset"])
        except ValueError:
            raise
        except Exception as exc:  # msgpack and shape errors: a damaged snapshot
            raise ValueError(f"not a producer state snapshot: {exc}") from None


class Held(NamedTuple):
    """The leading batches of a produced set that the log already holds."""

    offset: int
    """Where the first of them was appended: the offset to answer with."""
    nbytes: int
    """Their bytes: the set's first ``nbytes`` are not appended again."""
    messages: int
    """Their messages."""
    batches: int
    """How many of the set's magic 2 batches they are."""

    def rest(self, message_set: memoryview, producers: list[ProducerInfo]) -> tuple[memoryview, list[ProducerInfo]]:
        """The part of the set to append, and its batches' producer fields."""
        cut = self.nbytes
        return message_set[cut:], [p._replace(position=p.position - cut) for p in producers[self.batches :]]


__all__ = ["BatchMeta", "Held", "ProducerEntry", "ProducerStateTable", "REMEMBERED_BATCHES", "last_sequence"]
