"""The long nemesis suite's results table (tests/support/nemesis_report.py) and the
nemeses' timing (tests/support/nemesis.py: fixed in ``make test``, drawn from a seed
by ``scripts/nemesis.sh``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.nemesis import DELAY_S, FAULT_S, HOLD_S, timing
from tests.support.nemesis_report import load, main, table

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.replication.test_nemesis_a" name="test_a" time="30"/>
<testcase classname="tests.replication.test_nemesis_b" name="test_b" time="31">{b}</testcase>
</testsuite></testsuites>"""


def _verdict(test: str, name: str, hold: float, own: float, **counts: object) -> dict[str, object]:
    return {
        "nemesis": name,
        "test": f"tests/replication/test_nemesis_x.py::{test}",
        "delay_s": 1.5,
        "hold_s": hold,
        "seed": "7",
        "acked": 12_000,
        "failed": 0,
        "unknown": 0,
        "stored": 12_000,
        "lost": 0,
        "duplicates": 0,
        "order_violations": 0,
        "divergent": [],
        "unavailable_s": {"0": own, "1": 1.5, "2": 1.7},
        "examples": [],
        "problems": [],
        "full_isr_s": 1.0,
        **counts,
    }


def _run(outputs: Path, run: int, seed: str, verdicts: list[dict[str, object]], b_failure: str = "") -> None:
    folder = outputs / f"run-{run}"
    folder.mkdir()
    (folder / "seed").write_text(seed + "\n")
    (folder / "verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    (folder / "junit.xml").write_text(JUNIT.format(b=b_failure))


def test_the_table_has_a_row_per_nemesis_over_every_run_and_lists_failures_with_their_seed(tmp_path: Path) -> None:
    _run(tmp_path, 1, "11", [_verdict("test_a", "leader isolated", 4.0, 6.2), _verdict("test_b", "zk cut", 9.0, 0.3)])
    failure = "<failure message=\"AssertionError: sessions expired on ['broker-1']&#10;more\">trace</failure>"
    group = {"group_read": 9_000, "group_phantom_reads": 2, "group_committed_beyond": [0], "group_skipped": 40}
    _run(tmp_path, 2, "22", [_verdict("test_a", "leader isolated", 12.5, 6.8, lost=3, divergent=[0], **group)], failure)
    outcomes = load(tmp_path)
    assert [(o.run, o.test, o.passed, o.seed) for o in outcomes] == [
        (1, "test_a", True, "11"),
        (1, "test_b", True, "11"),
        (2, "test_a", True, "22"),
        (2, "test_b", False, "22"),
    ]
    text = table(outcomes)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "nemesis |" not in line]
    assert rows[0] == (
        "| leader isolated | 2 (2) | 1.5 s / 4.0-12.5 s | 12,000 | 3 | 0 | 0 | 1 "
        "| 6.2-6.8 s / 1.5-1.7 s (median 1.6) | 1.0 s | 2 / 1 / 40 |"
    )
    assert rows[1].startswith("| zk cut | 2 (1) | 1.5 s / 9.0 s | 12,000 | 0 |")  # one verdict: run 2 failed before
    assert rows[1].endswith("| — |")  # verdicts of runs without a group member
    assert "- run 2, seed 22, `test_b`: AssertionError: sessions expired on ['broker-1']" in text
    assert main([str(tmp_path)]) == 1  # a failure: the script's table says so, its status too


def test_without_a_seed_the_timing_is_fixed_and_a_seed_draws_the_same_timing_every_time() -> None:
    fixed = timing("leader isolated", {})
    assert (fixed.delay_s, fixed.hold_s, fixed.seed) == (0.0, FAULT_S, None)
    assert timing("leader isolated", {"LOGFERRY_NEMESIS_FAULT_S": "16"}).hold_s == 16.0

    drawn = timing("leader isolated", {"LOGFERRY_NEMESIS_SEED": "42"})
    assert drawn == timing("leader isolated", {"LOGFERRY_NEMESIS_SEED": "42"})  # replayable
    assert drawn.seed == "42" and "seed 42" in str(drawn)
    assert DELAY_S[0] <= drawn.delay_s <= DELAY_S[1] and HOLD_S[0] <= drawn.hold_s <= HOLD_S[1]
    # each nemesis draws its own, so one replays alone with -k whatever ran before it
    others = {timing(n, {"LOGFERRY_NEMESIS_SEED": "42"}) for n in ("a", "b", "c", "d")}
    assert len({(t.delay_s, t.hold_s) for t in others}) == 4
    held = timing("leader isolated", {"LOGFERRY_NEMESIS_SEED": "42", "LOGFERRY_NEMESIS_FAULT_S": "16"})
    assert (held.delay_s, held.hold_s) == (drawn.delay_s, 16.0)  # the hold fixed, the start still drawn
    spread = [timing("x", {"LOGFERRY_NEMESIS_SEED": str(s)}).hold_s for s in range(200)]
    assert min(spread) < 6.0 < 18.0 < max(spread)  # under the session and over three of them


def test_the_pipeline_nemeses_have_a_table_of_their_own(tmp_path: Path) -> None:
    def lines(resumed: float, **counts: object) -> dict[str, object]:
        line = {
            "nemesis": "WAN cut, mirror killed",
            "test": "tests/mirror/test_nemesis_wan_pipeline.py::test_b",
            "delay_s": 0.5,
            "hold_s": 60.0,
            "seed": "7",
            "written": 27_000,
            "live": 27_000,
            "mirrored": 27_000,
            "lost": 0,
            "duplicates": 0,
            "live_duplicates": 0,
            "order_violations": 0,
            "differ": [],
            "resumed_s": resumed,
            "caught_up_s": resumed + 2,
            "examples": [],
            "problems": [],
            **counts,
        }
        return line

    _run(tmp_path, 1, "11", [_verdict("test_a", "leader isolated", 4.0, 6.2), lines(1.2)])
    _run(tmp_path, 2, "22", [_verdict("test_a", "leader isolated", 4.0, 6.4), lines(2.0, duplicates=3, differ=["t-0"])])
    text = table(load(tmp_path))
    assert "| leader isolated | 2 (2) |" in text
    assert "| nemesis | runs (passed) | WAN cut after / held | lines per run |" in text
    assert (
        "| WAN cut, mirror killed | 2 (2) | 0.5 s / 60.0 s | 27,000 | 0 | 3 | 0 | 1 | 1.2-2.0 s | 3.2-4.0 s |" in text
    )
