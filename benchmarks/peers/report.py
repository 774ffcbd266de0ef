"""Collect the experiment's measurements and turn them into tables.

Kept apart from the runner so the arithmetic (medians, rates, ratios, overheads) is
plain functions over plain data, and the same text goes to the terminal, to
``results.md`` and into the README.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from peers.base import PAYLOAD_SIZE

PRODUCE_1 = "produce, batch 1, no ack"
PRODUCE_50 = "produce, 50 per ack"
CONSUME = "consume, ~1000 per pull"
CASES = (PRODUCE_1, PRODUCE_50, CONSUME)

TARGETS = {PRODUCE_1: 5.0, PRODUCE_50: 20.0, CONSUME: 10.0}
"""The issue's targets against the paper's peers: logferry's throughput as a multiple
of each peer's."""

PAPER_PEERS = ("RabbitMQ", "ActiveMQ")
MODERN_TARGET = 1.0
"""Against a modern peer (NATS JetStream, Redis Streams) the target is to be ahead."""

LATENCY_TARGET = 2.0
"""logferry's end-to-end p99 at most this multiple of the best peer's."""

LATENCY_POINTS = ("p50", "p99", "p99.9", "max")

PAPER_OVERHEAD = {"Kafka (paper)": 9, "ActiveMQ (paper)": 144}
"""Storage overhead per message reported by the paper (section 5), in bytes."""

REFERENCE = "logferry"


@dataclass
class Results:
    """Every timed run and storage sample of one invocation, plus what was skipped."""

    messages: int
    runs: int
    seconds: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    storage: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    systems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latency_rate: float = 0.0
    latency_seconds: float = 0.0
    latency: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def add_time(self, system: str, case: str, seconds: float) -> None:
        """Record one timed run of ``case``."""
        self.seconds.setdefault((system, case), []).append(seconds)

    def add_storage(self, system: str, case: str, bytes_per_message: float) -> None:
        """Record the bytes on disk per message written by one run of ``case``."""
        self.storage.setdefault((system, case), []).append(bytes_per_message)

    def add_latency(self, system: str, points: dict[str, float]) -> None:
        """Record the end-to-end percentiles (ms) of one latency run."""
        self.latency.setdefault(system, []).append(points)

    def latency_ms(self, system: str) -> dict[str, float] | None:
        """Each percentile's median over the runs, or None if never measured."""
        runs = self.latency.get(system)
        if not runs:
            return None
        return {p: statistics.median(run[p] for run in runs) for p in LATENCY_POINTS}

    def rate(self, system: str, case: str) -> float | None:
        """Messages per second of the median run, or None if never measured."""
        times = self.seconds.get((system, case))
        if not times:
            return None
        return self.messages / statistics.median(times)

    def to_json(self) -> dict:
        """Raw samples and the summary, for results.json."""
        return {
            "messages": self.messages,
            "runs": self.runs,
            "payload_bytes": PAYLOAD_SIZE,
            "systems": self.systems,
            "skipped": self.skipped,
            "failed": self.failed,
            "notes": self.notes,
            "seconds": [{"system": s, "case": c, "samples": v} for (s, c), v in self.seconds.items()],
            "storage_bytes_per_message": [{"system": s, "case": c, "samples": v} for (s, c), v in self.storage.items()],
            "summary": [row._asdict() for row in throughput_rows(self)],
            "latency": {
                "rate_msgs_per_s": self.latency_rate,
                "seconds": self.latency_seconds,
                "samples_ms": self.latency,
                "median_ms": {s: self.latency_ms(s) for s in self.latency},
            },
        }


class Row:
    """One line of the throughput table (median of the runs)."""

    def __init__(self, system: str, case: str, messages: int, samples: list[float]):
        self.system, self.case, self.messages = system, case, messages
        self.seconds = statistics.median(samples)
        self.rate = messages / self.seconds
        self.mb_per_s = self.rate * PAYLOAD_SIZE / 1e6
        rates = [messages / s for s in samples]
        self.low, self.high = min(rates), max(rates)
        self.runs = len(samples)

    def _asdict(self) -> dict:
        return {
            "system": self.system,
            "case": self.case,
            "messages": self.messages,
            "seconds": self.seconds,
            "msgs_per_s": self.rate,
            "mb_per_s": self.mb_per_s,
            "runs": self.runs,
            "msgs_per_s_min": self.low,
            "msgs_per_s_max": self.high,
        }


def throughput_rows(results: Results) -> list[Row]:
    """Rows in case order, then system order."""
    rows = []
    for case in CASES:
        for system in results.systems:
            samples = results.seconds.get((system, case))
            if samples:
                rows.append(Row(system, case, results.messages, samples))
    return rows


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """A GitHub-markdown table (also readable as plain text). ``align``: l or r per column."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align, strict=True))
            + " |"
        )

    rule = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, align, strict=True))
        + "|"
    )
    return [line(header), rule, *(line(r) for r in rows)]


def throughput_table(results: Results) -> list[str]:
    """system, case, messages, seconds, msgs/s, MB/s (median), and the runs' spread."""
    body = [
        [
            r.system,
            r.case,
            f"{r.messages:,}",
            f"{r.seconds:.2f}",
            f"{r.rate:,.0f}",
            f"{r.mb_per_s:.2f}",
            f"{r.low:,.0f}-{r.high:,.0f} ({r.runs})",
        ]
        for r in throughput_rows(results)
    ]
    return _table(["system", "case", "messages", "seconds", "msgs/s", "MB/s", "msgs/s min-max (runs)"], body, "llrrrrr")


def target(case: str, peer: str) -> tuple[float, str]:
    """The throughput target against ``peer`` and how to print it: a multiple for the
    paper's peers, ahead (> 1x) for the modern ones."""
    if peer in PAPER_PEERS:
        return TARGETS[case], f">= {TARGETS[case]:.0f}x"
    return MODERN_TARGET, f"> {MODERN_TARGET:.0f}x"


def ratio_table(results: Results) -> list[str]:
    """logferry's median throughput divided by each peer's, against the targets."""
    peers = [s for s in results.systems if s != REFERENCE]
    body = []
    for case in CASES:
        mine = results.rate(REFERENCE, case)
        for peer in peers:
            goal, shown = target(case, peer)
            theirs = results.rate(peer, case)
            if mine is None or theirs is None:
                body.append([case, peer, "n/a", shown, "-"])
                continue
            ratio = mine / theirs
            met = "yes" if (ratio >= goal if peer in PAPER_PEERS else ratio > goal) else "no"
            body.append([case, peer, f"{ratio:.2f}x", shown, met])
    return _table(["case", "logferry vs", "ratio", "target", "met"], body, "llrrl")


def latency_table(results: Results) -> list[str]:
    """End-to-end latency per system (median of the runs' percentiles), then
    logferry's p99 against the best peer's."""
    body = []
    for system in results.latency:  # the systems, and any with another setting
        points = results.latency_ms(system)
        if points is not None:
            body.append([system, *(f"{points[p]:.2f}" for p in LATENCY_POINTS), str(len(results.latency[system]))])
    lines = _table(["system", *(f"{p} ms" for p in LATENCY_POINTS), "runs"], body, "lrrrrr")
    verdict = latency_verdict(results)
    if verdict:
        lines += ["", *verdict.splitlines()]
    return lines


def latency_verdict(results: Results) -> str:
    """A line per logferry row (its own settings, and any other, e.g. visibility=written):
    its p99 as a multiple of the best peer's, against 2x."""
    peers = {s: results.latency_ms(s) for s in results.systems if s != REFERENCE}
    measured = {s: p["p99"] for s, p in peers.items() if p is not None}
    if not measured:
        return ""
    best = min(measured, key=lambda s: measured[s])
    lines = []
    for row in results.latency:
        mine = results.latency_ms(row)
        if not row.startswith(REFERENCE) or mine is None:
            continue
        ratio = mine["p99"] / measured[best] if measured[best] > 0 else float("inf")
        met = "met" if ratio <= LATENCY_TARGET else "not met"
        lines.append(
            f"{row} p99 {mine['p99']:.2f} ms = {ratio:.2f}x the best peer's ({best}, "
            f"{measured[best]:.2f} ms); target <= {LATENCY_TARGET:.0f}x: {met}"
        )
    return "\n".join(lines)


def storage_table(results: Results) -> list[str]:
    """Bytes on disk per message after each producer case, and the overhead beyond the
    200-byte payload (median of the runs)."""
    body = []
    for system in results.systems:
        for case in (PRODUCE_1, PRODUCE_50):
            samples = results.storage.get((system, case))
            if not samples:
                continue
            per_message = statistics.median(samples)
            body.append([system, f"data of '{case}'", f"{per_message:.1f}", f"{per_message - PAYLOAD_SIZE:.1f}"])
    for name, overhead in PAPER_OVERHEAD.items():
        body.append([name, "paper, section 5", f"{PAYLOAD_SIZE + overhead}", f"{overhead}"])
    return _table(["system", "written by", "bytes/msg on disk", "overhead/msg"], body, "llrr")


def report_lines(results: Results) -> list[str]:
    """The whole report: the three tables and what was skipped or failed."""
    lines = [
        f"{results.messages:,} messages of {PAYLOAD_SIZE} B per case, median of {results.runs} run(s)",
        "",
        "Throughput",
        "",
        *throughput_table(results),
        "",
        "logferry / peer (median msgs/s)",
        "",
        *ratio_table(results),
        "",
        "Storage",
        "",
        *storage_table(results),
    ]
    if results.latency:
        lines += [
            "",
            f"End-to-end latency: {results.latency_rate:,.0f} msgs/s for "
            f"{results.latency_seconds:g} s per run (first second not counted), "
            "producer and consumer in separate processes",
            "",
            *latency_table(results),
        ]
    for system, why in results.skipped.items():
        lines += ["", f"skipped {system}: {why}"]
    for system, why in results.failed.items():
        lines += ["", f"FAILED {system}: {why}"]
    for note in results.notes:
        lines += ["", f"note: {note}"]
    return lines
