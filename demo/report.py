"""The demo's report: every stage's count per topic, audit completeness, throughput.

Pure formatting and comparison over a :class:`Tally` the orchestration fills in, so
the verdict (every stage holds exactly what the hosts wrote) is one function,
:func:`problems`, and the text one function, :func:`render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.client import WindowCounts


@dataclass
class Tally:
    """What each stage holds at the end, per topic (None: the stage did not run)."""

    topics: list[str]
    lines: dict[str, int] = field(default_factory=dict)
    """Physical lines the hosts wrote."""
    written: dict[str, int] = field(default_factory=dict)
    """Records the hosts wrote (a stack trace with its first line is one record)."""
    audit_acked: dict[str, int] = field(default_factory=dict)
    """The agents' audit records added up: messages acknowledged by the live cluster."""
    agents_acked: int | None = None
    """The agents' own counters (status files), all topics."""
    live: dict[str, int] = field(default_factory=dict)
    dashboard: dict[str, int] = field(default_factory=dict)
    analysis: dict[str, int] | None = None
    """None when the mirror did not run (the loader then read the live cluster)."""
    landed: dict[str, int] | None = None
    """Rows in the lake per topic, read from it (None: the loader landed nothing)."""
    landed_files: dict[str, int] = field(default_factory=dict)
    landed_label: str = "Parquet rows"
    """The lake's column in the report: ``Parquet rows`` or ``Iceberg rows``."""
    audit_records: dict[str, int] = field(default_factory=dict)
    """Audit topic's message count per cluster name."""
    throughput: list[tuple[str, int, float, float | None]] = field(default_factory=list)
    """(stage, messages, seconds, peak messages/s over one progress interval or None)."""
    rotations: int = 0
    hosts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def total(self, counts: dict[str, int] | None) -> int | None:
        return None if counts is None else sum(counts.get(t, 0) for t in self.topics)


STAGES = (
    ("written", "written by hosts"),
    ("audit_acked", "shipped (audit)"),
    ("live", "live cluster"),
    ("analysis", "analysis cluster"),
    ("landed", "Parquet rows"),  # or Tally.landed_label
)


def _stages(tally: Tally) -> list[tuple[str, str]]:
    """(Tally field, column label) of every stage, the lake's as the tally names it."""
    return [(name, tally.landed_label if name == "landed" else label) for name, label in STAGES]


def completeness(tally: Tally) -> dict[str, float | None]:
    """Rows landed / the agents' audited count, per topic (the paper's audit)."""
    out: dict[str, float | None] = {}
    for topic in tally.topics:
        counts = WindowCounts(tally.audit_acked.get(topic, 0), (tally.landed or {}).get(topic, 0))
        out[topic] = counts.completeness  # the audit's one formula (broker.client.audit)
    return out


def problems(tally: Tally) -> list[str]:
    """Every disagreement between stages; empty when the run is exact."""
    found = []
    for name, label in _stages(tally):
        counts = getattr(tally, name)
        if counts is None:
            continue
        for topic in tally.topics:
            want, got = tally.written.get(topic, 0), counts.get(topic, 0)
            if got != want:
                kind = "duplicates (at-least-once redelivery)" if got > want else "missing"
                found.append(f"{topic}: {label} has {got:,}, the hosts wrote {want:,} ({abs(got - want):,} {kind})")
    total_written = tally.total(tally.written) or 0
    if tally.agents_acked is not None and tally.agents_acked != total_written:
        found.append(
            f"agents' counters say {tally.agents_acked:,} messages acknowledged, the hosts wrote {total_written:,}"
        )
    if tally.landed is None:
        found.append("the loader landed nothing (see its log)")
    for topic, value in completeness(tally).items():
        if value is None:
            found.append(f"{topic}: no audit records")
        elif value != 1.0:
            found.append(f"{topic}: audit completeness {value:.4%}")
    audit_counts = set(tally.audit_records.values())
    if len(audit_counts) > 1:
        found.append(f"audit topic differs between clusters: {tally.audit_records}")
    if not total_written:
        found.append("the hosts wrote nothing")
    return found


def _cell(counts: dict[str, int] | None, topic: str | None, tally: Tally) -> str:
    if counts is None:
        return "-"
    value = tally.total(counts) if topic is None else counts.get(topic, 0)
    return f"{value:,}"


def render(tally: Tally, lake: list[str]) -> str:
    """The report as text; ``lake``: its closing lines, where the lake is and how to read it."""
    cols = [label for name, label in _stages(tally)]
    width = max(16, *(len(t) for t in tally.topics))
    lines = [
        "",
        "=" * 78,
        "logferry demo: report",
        "=" * 78,
        "",
        "Messages per stage (a stack trace is one record: the agent joins its lines):",
        "",
    ]
    head = f"{'topic':<{width}} {'lines':>9} " + " ".join(f"{c:>16}" for c in cols)
    lines.append(head)
    lines.append("-" * len(head))
    for topic in [*tally.topics, None]:
        name = "total" if topic is None else topic
        lcount = sum(tally.lines.values()) if topic is None else tally.lines.get(topic, 0)
        row = f"{name:<{width}} {lcount:>9,} " + " ".join(
            f"{_cell(getattr(tally, n), topic, tally):>16}" for n, _ in STAGES
        )
        lines.append(row)
    lines.append("")
    if tally.agents_acked is not None:
        lines.append(
            f"agents' own counters ({', '.join(tally.hosts)}): "
            f"{tally.agents_acked:,} messages acknowledged by the live cluster"
        )
    if tally.dashboard:
        lines.append(f"dashboard consumer group (live cluster): {tally.total(tally.dashboard):,} messages read")
    if tally.audit_records:
        lines.append("audit topic records: " + ", ".join(f"{k} {v:,}" for k, v in tally.audit_records.items()))
    lines.append(f"log rotations while the agents tailed: {tally.rotations} per file per host")
    lines += ["", "Audit (paper, section 5): rows landed / messages the agents counted as acked:"]
    for topic, value in completeness(tally).items():
        shown = "no audit records" if value is None else f"{value:.2%}"
        lines.append(
            f"  {topic:<{width}} {(tally.landed or {}).get(topic, 0):>10,} / "
            f"{tally.audit_acked.get(topic, 0):>10,}  complete: {shown}"
        )
    lines += [
        "",
        "Throughput per stage (the hosts set the pace; each later stage kept up with it: see benchmarks for capacity):",
    ]
    for stage, count, seconds, peak in tally.throughput:
        extra = f"  (peak {peak:,.0f}/s over a progress interval)" if peak else ""
        lines.append(f"  {stage:<44} {count:>9,} in {seconds:6.1f}s = {count / max(seconds, 1e-9):>8,.0f}/s{extra}")
    lines += ["", *lake, ""]
    for note in tally.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
