"""The nemesis tests' checker: what a run of :mod:`tests.support.workload` proves.

After the fault is healed and every replica is back in sync, :func:`check` compares what
the workload recorded with what the cluster holds and reports, as Jepsen's analyses do:

* **lost**: acknowledged messages the partition does not hold (must be 0);
* **duplicates**: messages stored more than once (0 with idempotence);
* **order violations**: places where a partition holds a message after one the workload
  sent later (0: order per partition);
* **divergent replicas**: partitions whose replicas differ, byte for byte, below the high
  watermark (0);
* **unavailable seconds** per partition: the longest time, from the fault on, during
  which the partition acknowledged nothing although the workload kept sending (the
  issue's target for an isolated or killed leader: within 8 s);
* the counts of acknowledged, failed and unknown-outcome messages.

No IO here: the caller reads the partitions (:func:`read_partition`) and the replicas'
bytes, so the rules are tested without a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from broker.client import SimpleConsumer, messages_of
from tests.support.workload import Batch, parse, value


@dataclass
class Verdict:
    """What :func:`check` found (see the module)."""

    acked: int
    failed: int
    unknown: int
    stored: int
    lost: int
    duplicates: int
    order_violations: int
    divergent: list[int]
    unavailable_s: dict[int, float]
    examples: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Every broken guarantee, one line each (empty: the run is sound)."""
        found = []
        if self.lost:
            found.append(f"{self.lost} acknowledged messages lost")
        if self.duplicates:
            found.append(f"{self.duplicates} messages stored twice or more")
        if self.order_violations:
            found.append(f"{self.order_violations} order violations")
        if self.divergent:
            found.append(f"replicas differ below the high watermark in partitions {self.divergent}")
        return found

    def summary(self) -> str:
        unavailable = ", ".join(f"p{p} {s:.1f}s" for p, s in sorted(self.unavailable_s.items()))
        return (
            f"acknowledged {self.acked:,}, failed {self.failed:,}, unknown {self.unknown:,}, stored {self.stored:,}; "
            f"lost {self.lost}, duplicates {self.duplicates}, order violations {self.order_violations}, "
            f"divergent partitions {len(self.divergent)}; unavailable {unavailable}"
        )


def check(
    batches: Sequence[Batch],
    stored: Mapping[int, Sequence[bytes]],
    replicas: Mapping[int, Sequence[bytes]],
    fault_at: float,
    until: float,
) -> Verdict:
    """Judge a run: ``stored`` is each partition's values up to its high watermark,
    ``replicas`` each partition's replicas' bytes below it; unavailability counts from
    ``fault_at`` to ``until`` (``time.monotonic()`` readings)."""
    acked_values = {p: set() for p in stored}
    counts = Counter(b.outcome for b in batches for _ in b.seqs)
    for b in batches:
        if b.outcome == "acked":
            acked_values.setdefault(b.partition, set()).update(value(b.partition, s) for s in b.seqs)
    lost = duplicates = disorder = 0
    examples: list[str] = []
    for p, values in stored.items():
        held = Counter(values)
        missing = acked_values.get(p, set()) - held.keys()
        lost += len(missing)
        if missing:
            examples.append(f"p{p} lost e.g. {sorted(missing)[:3]}")
        twice = [v for v, n in held.items() if n > 1]
        duplicates += sum(held[v] - 1 for v in twice)
        if twice:
            examples.append(f"p{p} stored twice e.g. {sorted(twice)[:3]}")
        seqs = [parse(v)[1] for v in values]
        disorder += sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b < a)
    divergent = sorted(p for p, copies in replicas.items() if len(set(copies)) > 1)
    return Verdict(
        acked=counts["acked"],
        failed=counts["failed"],
        unknown=counts["unknown"],
        stored=sum(len(v) for v in stored.values()),
        lost=lost,
        duplicates=duplicates,
        order_violations=disorder,
        divergent=divergent,
        unavailable_s={p: unavailable_s(batches, p, fault_at, until) for p in stored},
        examples=examples,
    )


def unavailable_s(batches: Sequence[Batch], partition: int, fault_at: float, until: float) -> float:
    """The longest stretch within ``[fault_at, until]`` without an acknowledgement of
    ``partition`` (the workload sends to every partition all the time)."""
    times = sorted(
        b.done_at
        for b in batches
        if b.partition == partition
        and b.outcome == "acked"
        and b.done_at is not None
        and fault_at <= b.done_at <= until
    )
    marks = [fault_at, *times, until]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


def read_partition(consumer: SimpleConsumer, topic: str, partition: int) -> tuple[list[bytes], int]:
    """Every value of ``topic``-``partition`` up to its visible end (the high watermark),
    and that end."""
    offset, end = consumer.offsets(topic, partition)
    values: list[bytes] = []
    while offset < end:
        result = consumer.fetch(topic, partition, offset)
        for batch in result.batches:
            values.extend(m.value for m in messages_of(topic, partition, batch))
        if result.next_offset <= offset:
            raise AssertionError(f"{topic}-{partition}: no progress reading at offset {offset} of {end}")
        offset = result.next_offset
    return values, end


__all__ = ["Verdict", "check", "read_partition", "unavailable_s"]
