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
* the counts of acknowledged, failed and unknown-outcome messages;
* with a :class:`~tests.support.workload.Reader`'s reads (a consumer reading from before
  the fault to after the heal): **phantom reads**, messages a consumer read that the
  partition does not hold in the end (a read above the high watermark: 0); **read order
  violations**, a consumer reading a message after one the workload sent later, or
  twice (0); and **divergent reads**, partitions whose reads are not the start of what
  the partition holds (0);
* with a :class:`~tests.support.workload.GroupMember`'s reads and its group's committed
  positions: **group phantom reads**, messages the group was handed that the partition
  does not hold in the end (0); **committed past what survives**, partitions whose
  committed position is not a batch boundary of the final log at or below its end (0:
  the group would resume where other messages are written next); **group skipped**,
  messages the partition holds below the committed position that the group was never
  handed (0: a commit is a promise that everything before it was processed);
* with each broker's log (its acks=all answer spans, broker/replication/acks.py:
  ``acks=all answers in leader epoch <e> began at <t>`` and ``... ended at <t>``):
  **two leaders**, a partition's epoch in which more than one broker answered acks=all
  writes (0), and, reported, the **leader overlap**: how long, per partition, a leader
  of an older epoch still answered after one of a newer epoch began (every broker of a
  test shares the machine's clock). A leader may answer a write its successor already
  holds a few milliseconds late (the successor's last fetch reached it after the
  election); a zombie answering writes of its own would be an overlap of seconds.

For the pipeline nemeses (tests/support/pipeline_nemesis.py: an agent tailing files on
the live side, the mirror across a cut WAN), :func:`check_lines` counts from the lines
written to the agent's files to the records on the analysis cluster: **lines lost**
(written, never on the analysis cluster: 0), **duplicates** (a line there more than
once: 0 with the agent's resume and the offset-preserving mirror), **order violations**
(a partition holding a line of a file after one written later in that file: 0), and
partitions whose analysis copy is not the live one.

No IO here: the caller reads the partitions (:func:`read_partition`) and the replicas'
bytes, so the rules are tested without a cluster.
"""

from __future__ import annotations

import re
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
    read: int = 0
    """Messages a reader read (0: no reader)."""
    read_in_fault: int = 0
    """Of them, those read while the fault held (the caller sets it: the reader knows)."""
    phantom_reads: int = 0
    read_order_violations: int = 0
    divergent_reads: list[int] = field(default_factory=list)
    two_leaders: list[str] = field(default_factory=list)
    """One line per partition epoch answered by two brokers or more."""
    leader_overlap_s: dict[int, float] = field(default_factory=dict)
    """Per partition, the longest time an older epoch's leader answered after a newer
    epoch's began (0.0: never; empty: no logs read)."""
    group_read: int = 0
    """Messages a group member was handed (0: no group member)."""
    group_phantom_reads: int = 0
    group_committed_beyond: list[int] = field(default_factory=list)
    """Partitions whose committed position the final log does not have."""
    group_skipped: int = 0

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
        if self.phantom_reads:
            found.append(f"{self.phantom_reads} messages read that the partitions do not hold")
        if self.read_order_violations:
            found.append(f"{self.read_order_violations} messages read out of order or twice")
        if self.divergent_reads:
            found.append(f"what was read is not the start of partitions {self.divergent_reads}")
        if self.group_phantom_reads:
            found.append(f"{self.group_phantom_reads} messages handed to the group that the partitions do not hold")
        if self.group_committed_beyond:
            found.append(f"committed positions the log does not have in partitions {self.group_committed_beyond}")
        if self.group_skipped:
            found.append(f"{self.group_skipped} messages below the committed positions never handed to the group")
        found.extend(self.two_leaders)
        endless = sorted(p for p, s in self.leader_overlap_s.items() if s == float("inf"))
        if endless:
            found.append(f"a leader of an older epoch never stopped answering in partitions {endless}")
        return found

    def summary(self) -> str:
        unavailable = ", ".join(f"p{p} {s:.1f}s" for p, s in sorted(self.unavailable_s.items()))
        return (
            f"acknowledged {self.acked:,}, failed {self.failed:,}, unknown {self.unknown:,}, stored {self.stored:,}; "
            f"lost {self.lost}, duplicates {self.duplicates}, order violations {self.order_violations}, "
            f"divergent partitions {len(self.divergent)}; unavailable {unavailable}"
            + (
                f"; read {self.read:,} ({self.read_in_fault:,} in the fault): phantom {self.phantom_reads}, "
                f"out of order {self.read_order_violations}, "
                f"divergent {len(self.divergent_reads)}"
                if self.read
                else ""
            )
            + (
                f"; group read {self.group_read:,}: phantom {self.group_phantom_reads}, committed past what "
                f"survives {len(self.group_committed_beyond)}, skipped {self.group_skipped}"
                if self.group_read
                else ""
            )
            + (
                "; leader overlap " + ", ".join(f"p{p} {s:.3f}s" for p, s in sorted(self.leader_overlap_s.items()))
                if self.leader_overlap_s
                else ""
            )
        )


def check(
    batches: Sequence[Batch],
    stored: Mapping[int, Sequence[bytes]],
    replicas: Mapping[int, Sequence[bytes]],
    fault_at: float,
    until: float,
    reads: Mapping[int, Sequence[bytes]] | None = None,
    spans: Sequence[AnswerSpan] | None = None,
    group: GroupRun | None = None,
) -> Verdict:
    """Judge a run: ``stored`` is each partition's values up to its high watermark,
    ``replicas`` each partition's replicas' bytes below it; unavailability counts from
    ``fault_at`` to ``until`` (``time.monotonic()`` readings); ``reads``, each
    partition's values as a reader read them from its start (None: no reader);
    ``spans``, the brokers' acks=all answer spans (:func:`answer_spans`; None: not read);
    ``group``, what a group member read and committed (None: no group member)."""
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
    phantoms, read_disorder, divergent_reads = check_reads(reads or {}, stored, examples)
    doubled, overlap = two_leaders(spans) if spans is not None else ([], {})
    group_phantoms, beyond, skipped = check_group(group, stored, examples) if group is not None else (0, [], 0)
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
        read=sum(len(v) for v in (reads or {}).values()),
        phantom_reads=phantoms,
        read_order_violations=read_disorder,
        divergent_reads=divergent_reads,
        two_leaders=doubled,
        leader_overlap_s=overlap,
        group_read=sum(len(v) for v in group.reads.values()) if group is not None else 0,
        group_phantom_reads=group_phantoms,
        group_committed_beyond=beyond,
        group_skipped=skipped,
    )


@dataclass(frozen=True)
class GroupRun:
    """What a consumer group did in a run, and where the final log's messages are."""

    reads: Mapping[int, Sequence[bytes]]
    """Per partition, the values the group member was handed."""
    committed: Mapping[int, tuple[int, int]]
    """Per partition, the group's committed ``(offset, skip)`` at the end."""
    positions: Mapping[int, Sequence[tuple[int, int]]]
    """Per partition, the ``(batch offset, index in the batch)`` of each stored value,
    in order (:func:`read_positions`); with ``ends``, the final log's layout."""
    ends: Mapping[int, int]


def check_group(
    group: GroupRun, stored: Mapping[int, Sequence[bytes]], examples: list[str]
) -> tuple[int, list[int], int]:
    """``(group phantom reads, partitions committed past what survives, messages skipped
    below a committed position)`` (see the module); adds examples to ``examples``."""
    phantoms = skipped = 0
    beyond = []
    for p, values in group.reads.items():
        kept = set(stored.get(p, []))
        ghosts = [v for v in values if v not in kept]
        phantoms += len(ghosts)
        if ghosts:
            examples.append(f"p{p} handed to the group but not held e.g. {ghosts[:3]}")
    for p, (offset, skip) in sorted(group.committed.items()):
        positions = list(group.positions.get(p, []))
        boundaries = {o for o, _ in positions} | {group.ends.get(p, 0)}
        if offset not in boundaries or offset > group.ends.get(p, 0):
            beyond.append(p)
            examples.append(f"p{p} committed at {offset}, not a batch of the final log (end {group.ends.get(p, 0)})")
            continue
        read = set(group.reads.get(p, []))
        below = [v for v, at in zip(stored.get(p, []), positions, strict=True) if at < (offset, skip)]
        never = [v for v in below if v not in read]
        skipped += len(never)
        if never:
            examples.append(f"p{p} committed at {offset} but never handed e.g. {never[:3]}")
    return phantoms, sorted(beyond), skipped


@dataclass(frozen=True)
class AnswerSpan:
    """A broker's acks=all answers as leader of a partition in one epoch, from its log."""

    broker: int
    partition: int
    epoch: int
    began: float
    """``time.time()`` of its first answer."""
    ended: float | None
    """Of its last (None: the log says no end: it still leads in that epoch)."""


SPAN_LINE = re.compile(
    r"(?P<topic>\S+)-(?P<p>\d+): acks=all answers in leader epoch (?P<epoch>\d+) (?P<what>began|ended) at (?P<t>[\d.]+)"
)


def answer_spans(broker: int, log_text: str, topic: str, killed_at: Sequence[float] = ()) -> list[AnswerSpan]:
    """The spans in broker ``broker``'s log of ``topic``'s partitions. ``killed_at``: when
    (``time.time()``) the test killed it with kill -9, which leaves no end line: a span
    without one that began before a kill ended at that kill, not "still answering"."""
    began: dict[tuple[int, int], float] = {}
    ended: dict[tuple[int, int], float] = {}
    for match in SPAN_LINE.finditer(log_text):
        if match["topic"] != topic:
            continue
        key, at = (int(match["p"]), int(match["epoch"])), float(match["t"])
        if match["what"] == "began":
            began[key] = min(began.get(key, at), at)
        else:
            ended[key] = max(ended.get(key, at), at)
    spans = []
    for (p, epoch), at in sorted(began.items()):
        end = ended.get((p, epoch))
        if end is None:
            end = min((k for k in killed_at if k >= at), default=None)
        spans.append(AnswerSpan(broker, p, epoch, at, end))
    return spans


def two_leaders(spans: Sequence[AnswerSpan]) -> tuple[list[str], dict[int, float]]:
    """``(partition epochs answered by two brokers or more, the leader overlap per
    partition)`` (see the module); a span without an end counts as still answering."""
    by_epoch: dict[tuple[int, int], set[int]] = {}
    for span in spans:
        by_epoch.setdefault((span.partition, span.epoch), set()).add(span.broker)
    doubled = [
        f"p{p} epoch {epoch}: acks=all writes answered by brokers {sorted(brokers)}"
        for (p, epoch), brokers in sorted(by_epoch.items())
        if len(brokers) > 1
    ]
    overlap: dict[int, float] = {}
    for old in spans:
        overlap.setdefault(old.partition, 0.0)
        for new in spans:
            if new.partition == old.partition and new.epoch > old.epoch and new.broker != old.broker:
                last = float("inf") if old.ended is None else old.ended
                overlap[old.partition] = max(overlap[old.partition], last - new.began)
    return doubled, overlap


def check_reads(
    reads: Mapping[int, Sequence[bytes]], stored: Mapping[int, Sequence[bytes]], examples: list[str]
) -> tuple[int, int, list[int]]:
    """``(phantom reads, read order violations, partitions whose reads are not the start
    of what they hold)`` (see the module); adds an example of each to ``examples``."""
    phantoms = disorder = 0
    divergent = []
    for p, values in reads.items():
        held = stored.get(p, [])
        kept = set(held)
        ghosts = [v for v in values if v not in kept]
        phantoms += len(ghosts)
        if ghosts:
            examples.append(f"p{p} read but not held e.g. {ghosts[:3]}")
        seqs = [parse(v)[1] for v in values]
        disorder += sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b <= a)
        if list(values) != list(held[: len(values)]):
            divergent.append(p)
            at = next((i for i, (a, b) in enumerate(zip(values, held, strict=False)) if a != b), len(held))
            examples.append(f"p{p} read {len(values):,}, not the partition's start from message {at}")
    return phantoms, disorder, sorted(divergent)


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


@dataclass
class LineVerdict:
    """What :func:`check_lines` found, and how the mirror came back (see the module)."""

    written: int
    """Lines written to the agent's files."""
    live: int
    """Records of those files on the live cluster."""
    mirrored: int
    """Records of those files on the analysis cluster."""
    lost: int
    duplicates: int
    """Records on the analysis cluster beyond the first of their line."""
    live_duplicates: int
    order_violations: int
    differ: list[str]
    """Topic-partitions whose analysis copy is not the live one (the caller compares)."""
    resumed_s: float | None = None
    """Seconds from the heal to the copy's resumption (the caller's measure: the first
    bytes of a topic that appeared during the cut on the analysis cluster)."""
    caught_up_s: float | None = None
    """Seconds from the heal to the analysis cluster holding all the live one holds."""
    examples: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Every broken guarantee, one line each (empty: the run is sound)."""
        found = []
        if self.lost:
            found.append(f"{self.lost} lines written never reached the analysis cluster")
        if self.duplicates:
            found.append(f"{self.duplicates} lines on the analysis cluster more than once")
        if self.live_duplicates:
            found.append(f"{self.live_duplicates} lines on the live cluster more than once")
        if self.order_violations:
            found.append(f"{self.order_violations} lines out of order in their partition")
        if self.differ:
            found.append(f"the analysis copy is not the live one in {', '.join(self.differ)}")
        return found

    def summary(self) -> str:
        def seconds(s: float | None) -> str:
            return "never" if s is None else f"{s:.1f}s"

        return (
            f"written {self.written:,}, live {self.live:,}, mirrored {self.mirrored:,}; lost {self.lost}, "
            f"duplicates {self.duplicates} (live {self.live_duplicates}), order violations "
            f"{self.order_violations}, partitions differing {len(self.differ)}; resumed "
            f"{seconds(self.resumed_s)} and caught up {seconds(self.caught_up_s)} after the heal"
        )


Line = tuple[str, int, str]
"""A line's identity and text: ``(file path, byte offset in the file, line)``, as the
agent's records carry them (``file``, ``offset``, ``line``)."""


def check_lines(
    written: Sequence[Line],
    live: Mapping[str, Sequence[Line]],
    mirrored: Mapping[str, Sequence[Line]],
    differ: Sequence[str] = (),
) -> LineVerdict:
    """Judge a pipeline run: ``written``, every line the test wrote; ``live`` and
    ``mirrored``, the records of each topic-partition (``"<topic>-<p>"``) of the live
    and the analysis cluster, in log order (records of other files are ignored);
    ``differ``, the partitions whose copies the caller found different."""
    wanted = {(f, o): line for f, o, line in written}
    examples: list[str] = []

    def count(parts: Mapping[str, Sequence[Line]], where: str) -> tuple[Counter[tuple[str, int]], int]:
        held: Counter[tuple[str, int]] = Counter()
        disorder = 0
        for name, records in parts.items():
            last: dict[str, int] = {}
            for f, o, line in records:
                if (f, o) not in wanted:
                    continue
                if wanted[(f, o)] != line:
                    examples.append(f"{where} {name}: {f}@{o} holds {line[:60]!r}, not the line written")
                if held[(f, o)] == 0 and o < last.get(f, -1):
                    disorder += 1
                    if disorder == 1:
                        examples.append(f"{where} {name}: {f}@{o} after {f}@{last[f]}")
                held[(f, o)] += 1
                last[f] = max(o, last.get(f, -1))
        return held, disorder

    on_live, live_disorder = count(live, "live")
    on_analysis, disorder = count(mirrored, "analysis")
    missing = [k for k in wanted if k not in on_analysis]
    if missing:
        examples.append(f"lost e.g. {missing[:3]}")
    twice = [k for k, n in on_analysis.items() if n > 1]
    if twice:
        examples.append(f"on the analysis cluster twice e.g. {twice[:3]}")
    return LineVerdict(
        written=len(wanted),
        live=sum(on_live.values()),
        mirrored=sum(on_analysis.values()),
        lost=len(missing),
        duplicates=sum(n - 1 for n in on_analysis.values()),
        live_duplicates=sum(n - 1 for n in on_live.values()),
        order_violations=disorder + live_disorder,
        differ=sorted(differ),
        examples=examples,
    )


def read_partition(consumer: SimpleConsumer, topic: str, partition: int) -> tuple[list[bytes], int]:
    """Every value of ``topic``-``partition`` up to its visible end (the high watermark),
    and that end."""
    values, _positions, end = read_positions(consumer, topic, partition)
    return values, end


def read_positions(
    consumer: SimpleConsumer, topic: str, partition: int
) -> tuple[list[bytes], list[tuple[int, int]], int]:
    """Every value of ``topic``-``partition`` up to its visible end, where each is
    (``(batch offset, index in the batch)``), and that end."""
    offset, end = consumer.offsets(topic, partition)
    values: list[bytes] = []
    positions: list[tuple[int, int]] = []
    while offset < end:
        result = consumer.fetch(topic, partition, offset)
        for batch in result.batches:
            for m in messages_of(topic, partition, batch):
                values.append(m.value)
                positions.append((m.offset, m.index))
        if result.next_offset <= offset:
            raise AssertionError(f"{topic}-{partition}: no progress reading at offset {offset} of {end}")
        offset = result.next_offset
    return values, positions, end


__all__ = [
    "AnswerSpan",
    "GroupRun",
    "Line",
    "LineVerdict",
    "Verdict",
    "answer_spans",
    "check",
    "check_group",
    "check_lines",
    "check_reads",
    "read_partition",
    "read_positions",
    "two_leaders",
    "unavailable_s",
]
