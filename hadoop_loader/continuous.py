"""``logferry load --every 5m``: the landing job in a loop, for a lake minutes behind.

Why: a nightly load leaves the lake up to a day behind; running the same job every few
minutes, in one process that keeps its SparkSession (a JVM start costs 10-40 s here),
lands within about one interval. Each run is an ordinary run (:func:`hadoop_loader.job.
run_load`): the same plan, the same commit (a Parquet manifest, or an Iceberg commit
carrying the offsets), so the exactly-once argument is unchanged; a run killed at any
point is one the next run (of this process or another) picks up after.

The loop, as a small state machine:

- RUN: one run. A run that fails (NameNode down, safe mode, a broker unreachable) is
  reported in one line and the loop goes on: the next run starts from the last commit.
  A config error (exit 2) or an error that is not the loader's (a dead JVM) ends it.
- WAIT: until the next tick (``start + k * interval``; a run longer than the interval
  starts the next at once), or until asked to stop.
- STOP: SIGTERM or SIGINT sets a flag: between runs the loop ends at once; during a run
  the run finishes (it is bounded by ``load.max_bytes_per_partition``) and the loop
  ends after it. Exit 0 (130 after SIGINT), as every logferry command.

With Parquet output the runs share a :class:`~hadoop_loader.lake_cache.LakeCache`: the
first run reads every committed manifest and landed file's footer, later ones only
those of files new or changed since (the listing still finds every missing or resized
file each run).

Output is one line per run (:func:`describe`), so a loop that runs for months writes a
bounded amount per run. The audit is off in this mode (run it nightly with
``logferry load --require-complete``).
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hadoop_loader.config import LoaderConfig
from hadoop_loader.errors import LoaderError
from hadoop_loader.lake_cache import LakeCache
from hadoop_loader.results import LoadResult, LoadSession

UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
MIN_INTERVAL_S = 1.0
"""Shorter intervals would only spin: a run alone takes a second or more."""


def parse_interval(text: str) -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1h"`` -> seconds; ValueError saying what is expected."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {text!r}")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if seconds < MIN_INTERVAL_S:
        raise ValueError(f"must be at least {MIN_INTERVAL_S:g}s, got {text!r}")
    return seconds


def next_start(previous: float, now: float, interval: float) -> float:
    """When the run after one that started at ``previous`` starts: one interval later,
    or ``now`` when that moment has passed (the run took longer than the interval)."""
    return max(previous + interval, now)


@dataclass(frozen=True)
class Outcome:
    """One run of the loop: its result, or the error that ended it."""

    started: float
    """Epoch seconds."""
    result: LoadResult | None
    error: LoaderError | None = None


def describe(outcome: Outcome) -> str:
    """The run's one line: when, what it landed (or why it failed), how long."""
    when = dt.datetime.fromtimestamp(outcome.started, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if outcome.error is not None:
        return f"{when} run failed (the next run starts from the last commit): {outcome.error}"
    result = outcome.result
    assert result is not None
    if result.sequence is None:
        return f"{when} nothing new ({result.seconds:.1f} s)"
    dups = f", {result.duplicates:,} duplicate(s) dropped" if result.dedup else ""
    return f"{when} run {result.sequence} committed: {result.rows:,} rows{dups} in {result.seconds:.1f} s"


class StopFlag:
    """Set by SIGTERM or SIGINT (:meth:`install`); the loop checks it between runs."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signals: list[int] = []
        self.during_run = False
        """Whether a signal arrived while a run was in flight (it finished first)."""
        self.running = False

    def set(self, signum: int = 0) -> None:
        self.signals.append(signum)
        self.during_run = self.during_run or self.running
        self.event.set()

    def install(self) -> Callable[[], None]:
        """Handle SIGTERM and SIGINT by setting the flag; returns a function that puts
        the previous handlers back."""
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def handler(signum: int, _frame: Any) -> None:
            self.set(signum)

        for sig in previous:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore


def run_every(
    config: LoaderConfig,
    interval: float,
    stop: StopFlag,
    report: Callable[[Outcome], None],
    *,
    spark: Any = None,
    master: str | None = None,
    max_runs: int | None = None,
) -> int:
    """Run loads every ``interval`` seconds until ``stop`` is set (or ``max_runs``);
    ``report`` gets each run's :class:`Outcome`. Returns the exit code: 0, or the
    code of the error that ended the loop."""
    from hadoop_loader.job import run_load

    config = replace(config, audit=replace(config.audit, enabled=False))
    session = LoadSession(config, spark, master)  # one JVM for every run
    cache = LakeCache()  # each manifest and footer read once while its file stays unchanged
    runs = 0
    start = time.monotonic()
    while not stop.event.is_set() and (max_runs is None or runs < max_runs):
        started = time.time()
        stop.running = True
        try:
            outcome = Outcome(started, run_load(config, session=session, cache=cache))
        except LoaderError as exc:
            if exc.exit_code == 2:  # a config mistake: no later run can succeed
                raise
            outcome = Outcome(started, None, exc)
        finally:
            stop.running = False
        runs += 1
        report(outcome)
        start = next_start(start, time.monotonic(), interval)
        stop.event.wait(max(0.0, start - time.monotonic()))
    return 0
