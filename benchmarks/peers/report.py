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
"""The issue's targets: logferry's throughput as a multiple of each peer's."""

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

    def add_time(self, system: str, case: str, seconds: float) -> None:
        """Record one timed run of ``case``."""
        self.seconds.setdefault((system, case), []).append(seconds)

    def add_storage(self, system: str, case: str, bytes_per_message: float) -> None:
        """Record the bytes on disk per message written by one run of ``case``."""
        self.storage.setdefault((system, case), []).append(bytes_per_message)

    def rate(self, system: str, case: str) -> float | None:
        """Messages per second of the median run, or None if never measured."""
        times = self.seconds.get((system, case))
        if not times:
            return None
        return self.messages / statistics.median(times)

    def to_json(self) -> dict:
        """Raw samples and the summary, for results.json."""
        return {
            "messages": self.messages, "runs": self.runs, "payload_bytes": PAYLOAD_SIZE,
            "systems": self.systems, "skipped": self.skipped, "failed": self.failed,
            "notes": self.notes,
            "seconds": [{"system": s, "case": c, "samples": v}
                        for (s, c), v in self.seconds.items()],
            "storage_bytes_per_message": [{"system": s, "case": c, "samples": v}
                                          for (s, c), v in self.storage.items()],
            "summary": [row._asdict() for row in throughput_rows(self)],
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
        return {"system": self.system, "case": self.case, "messages": self.messages,
                "seconds": self.seconds, "msgs_per_s": self.rate, "mb_per_s": self.mb_per_s,
                "runs": self.runs, "msgs_per_s_min": self.low, "msgs_per_s_max": self.high}


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
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if a == "l" else c.rjust(w)
                                 for c, w, a in zip(cells, widths, align)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2))
                          for w, a in zip(widths, align)) + "|"
    return [line(header), rule, *(line(r) for r in rows)]


def throughput_table(results: Results) -> list[str]:
    """system, case, messages, seconds, msgs/s, MB/s (median), and the runs' spread."""
    body = [[r.system, r.case, f"{r.messages:,}", f"{r.seconds:.2f}", f"{r.rate:,.0f}",
             f"{r.mb_per_s:.2f}", f"{r.low:,.0f}-{r.high:,.0f} ({r.runs})"]
            for r in throughput_rows(results)]
    return _table(["system", "case", "messages", "seconds", "msgs/s", "MB/s",
                   "msgs/s min-max (runs)"], body, "llrrrrr")


def ratio_table(results: Results) -> list[str]:
    """logferry's median throughput divided by each peer's, against the targets."""
    peers = [s for s in results.systems if s != REFERENCE]
    body = []
    for case in CASES:
        mine = results.rate(REFERENCE, case)
        for peer in peers:
            theirs = results.rate(peer, case)
            if mine is None or theirs is None:
                body.append([case, peer, "n/a", f">= {TARGETS[case]:.0f}x", "-"])
                continue
            ratio = mine / theirs
            met = "yes" if ratio >= TARGETS[case] else "no"
            body.append([case, peer, f"{ratio:.1f}x", f">= {TARGETS[case]:.0f}x", met])
    return _table(["case", "logferry vs", "ratio", "target", "met"], body, "llrrl")


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
            body.append([system, f"data of '{case}'", f"{per_message:.1f}",
                         f"{per_message - PAYLOAD_SIZE:.1f}"])
    for name, overhead in PAPER_OVERHEAD.items():
        body.append([name, "paper, section 5", f"{PAYLOAD_SIZE + overhead}", f"{overhead}"])
    return _table(["system", "written by", "bytes/msg on disk", "overhead/msg"], body, "llrr")


def report_lines(results: Results) -> list[str]:
    """The whole report: the three tables and what was skipped or failed."""
    lines = [f"{results.messages:,} messages of {PAYLOAD_SIZE} B per case, median of "
             f"{results.runs} run(s)", "", "Throughput", "", *throughput_table(results),
             "", "logferry / peer (median msgs/s)", "", *ratio_table(results),
             "", "Storage", "", *storage_table(results)]
    for system, why in results.skipped.items():
        lines += ["", f"skipped {system}: {why}"]
    for system, why in results.failed.items():
        lines += ["", f"FAILED {system}: {why}"]
    for note in results.notes:
        lines += ["", f"note: {note}"]
    return lines
