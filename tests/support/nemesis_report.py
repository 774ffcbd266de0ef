"""The long nemesis suite's results table, from what ``scripts/nemesis.sh`` kept.

Each run of the script's loop leaves, in ``<outputs>/run-<n>/``, pytest's ``junit.xml``
(which nemesis passed, which failed and why) and ``verdicts.jsonl`` (one line per
nemesis that got as far as a verdict: :func:`tests.support.nemesis.record`). This
module reads them and prints one Markdown row per nemesis, as docs/guarantees.md and
docs/testing.md show them (the pipeline nemeses, which count lines from the agent's
files to the analysis cluster, in a table of their own), then every failure with the
seed that replays it:

    .venv/bin/python -m tests.support.nemesis_report /tmp/logferry-nemesis.XXXXXX

No IO outside :func:`load`: :func:`table` is unit tested (tests/unit/test_nemesis_report.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Outcome:
    """One nemesis in one run of the script."""

    run: int
    test: str
    """The test function's name (one per nemesis)."""
    passed: bool
    failure: str = ""
    """The first line of pytest's failure message (empty: passed)."""
    verdict: dict[str, Any] | None = None
    """Its line of ``verdicts.jsonl`` (None: it failed before a verdict)."""
    seed: str = ""
    """The run's seed (``run-<n>/seed``)."""


@dataclass
class Row:
    """What the table says of one nemesis over every run."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)


def load(outputs: Path) -> list[Outcome]:
    """Every nemesis of every run under ``outputs`` (``run-<n>/`` folders)."""
    found = []
    for folder in sorted(outputs.glob("run-*"), key=lambda p: int(p.name.split("-")[1])):
        run = int(folder.name.split("-")[1])
        seed = (folder / "seed").read_text().strip() if (folder / "seed").exists() else ""
        verdicts = {}
        if (folder / "verdicts.jsonl").exists():
            for line in (folder / "verdicts.jsonl").read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    verdicts[record["test"].rsplit("::", 1)[-1]] = record
        if not (folder / "junit.xml").exists():
            continue  # interrupted before pytest wrote it: nothing to say of that run
        for case in ET.parse(folder / "junit.xml").getroot().iter("testcase"):
            if case.find("skipped") is not None:
                continue
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            name = case.get("name", "?")
            message = "" if bad is None else (bad.get("message") or bad.text or "failed").strip().splitlines()[0]
            found.append(Outcome(run, name, bad is None, message[:300], verdicts.get(name), seed))
    return found


def _span(values: Sequence[float], unit: str = "s") -> str:
    if not values:
        return "—"
    low, high = min(values), max(values)
    if len(values) > 2:
        return f"{low:.1f}-{high:.1f} {unit} (median {statistics.median(values):.1f})"
    return f"{low:.1f} {unit}" if low == high else f"{low:.1f}-{high:.1f} {unit}"


def _group(verdicts: Sequence[dict[str, Any]]) -> str:
    """The consumer group's figures summed over the runs (— : no run had a group member)."""
    if not any(v.get("group_read") for v in verdicts):
        return "—"
    phantom = sum(v.get("group_phantom_reads", 0) for v in verdicts)
    beyond = sum(len(v.get("group_committed_beyond", [])) for v in verdicts)
    return f"{phantom} / {beyond} / {sum(v.get('group_skipped', 0) for v in verdicts)}"


def is_pipeline(row: Row) -> bool:
    """A pipeline nemesis's row (tests/support/pipeline_nemesis.py: lines, not acks)."""
    return any(o.verdict is not None and "written" in o.verdict for o in row.outcomes)


def table(outcomes: Sequence[Outcome]) -> str:
    """The Markdown table (one row per nemesis, in the order first seen), the pipeline
    nemeses' table if any ran (:func:`pipeline_table`), then the failures, each with its
    run, seed and message."""
    rows: dict[str, Row] = {}
    for outcome in outcomes:
        name = outcome.verdict["nemesis"] if outcome.verdict else outcome.test
        row = rows.setdefault(outcome.test, Row(name))
        row.outcomes.append(outcome)
        if outcome.verdict and row.name == outcome.test:
            row.name = outcome.verdict["nemesis"]
    lines = (
        []
        if all(is_pipeline(r) for r in rows.values())
        else broker_table([r for r in rows.values() if not is_pipeline(r)])
    )
    pipelines = [r for r in rows.values() if is_pipeline(r)]
    if pipelines:
        lines += [""] if lines else []
        lines += pipeline_table(pipelines)
    failures = [o for o in outcomes if not o.passed]
    if failures:
        lines.append("")
        lines.append("Failures (replay one: `LOGFERRY_NEMESIS_SEED=<seed> scripts/nemesis.sh 1 -k <test>`):")
        for o in failures:
            lines.append(f"- run {o.run}, seed {o.seed or '?'}, `{o.test}`: {o.failure}")
    return "\n".join(lines)


def pipeline_table(rows: Sequence[Row]) -> list[str]:
    """The pipeline nemeses' rows: from the lines written to the agent's files to the
    analysis cluster (tests/support/checker.py: check_lines), and the mirror's return."""
    lines = [
        "| nemesis | runs (passed) | WAN cut after / held | lines per run | lost | duplicates | order violations "
        "| partitions differing | copy resumed after the heal | caught up after the heal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        verdicts = [o.verdict for o in row.outcomes if o.verdict]
        written = [v["written"] for v in verdicts]
        written_text = (
            "—" if not written else f"{min(written):,}" + (f"-{max(written):,}" if max(written) > min(written) else "")
        )
        lines.append(
            f"| {row.name} | {len(row.outcomes)} ({sum(o.passed for o in row.outcomes)}) "
            f"| {_span([v['delay_s'] for v in verdicts])} / {_span([v['hold_s'] for v in verdicts])} "
            f"| {written_text} | {sum(v['lost'] for v in verdicts)} "
            f"| {sum(v['duplicates'] for v in verdicts)} | {sum(v['order_violations'] for v in verdicts)} "
            f"| {sum(len(v['differ']) for v in verdicts)} "
            f"| {_span([v['resumed_s'] for v in verdicts if v.get('resumed_s') is not None])} "
            f"| {_span([v['caught_up_s'] for v in verdicts if v.get('caught_up_s') is not None])} |"
        )
    return lines


def broker_table(rows: Sequence[Row]) -> list[str]:
    """The broker nemeses' rows (the workload's acknowledgements, the checker's verdict)."""
    lines = [
        "| nemesis | runs (passed) | fault after / held | acknowledged per run | lost | duplicates "
        "| order violations | divergent replicas | unavailable: partition 0 / the others | full ISR after the heal "
        "| group: phantom reads / committed past what survives / skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        verdicts = [o.verdict for o in row.outcomes if o.verdict]
        passed = sum(o.passed for o in row.outcomes)
        own = [v["unavailable_s"]["0"] for v in verdicts]
        others = [s for v in verdicts for p, s in v["unavailable_s"].items() if p != "0"]
        acked = [v["acked"] for v in verdicts]
        acked_text = "—" if not acked else f"{min(acked):,}" + (f"-{max(acked):,}" if max(acked) > min(acked) else "")
        lines.append(
            f"| {row.name} | {len(row.outcomes)} ({passed}) "
            f"| {_span([v['delay_s'] for v in verdicts])} / {_span([v['hold_s'] for v in verdicts])} "
            f"| {acked_text} "
            f"| {sum(v['lost'] for v in verdicts)} | {sum(v['duplicates'] for v in verdicts)} "
            f"| {sum(v['order_violations'] for v in verdicts)} "
            f"| {sum(1 for v in verdicts if v['divergent'])} "
            f"| {_span(own)} / {_span(others)} | {_span([v['full_isr_s'] for v in verdicts])} "
            f"| {_group(verdicts)} |"
        )
    return lines


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.nemesis_report OUTPUTS_DIR (scripts/nemesis.sh prints it)")
        return 2
    outcomes = load(Path(argv[0]))
    if not outcomes:
        print(f"no nemesis ran under {argv[0]}")
        return 1
    print(table(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
