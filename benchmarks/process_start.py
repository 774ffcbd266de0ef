"""What starting a process costs: CPU and import time per kind of logferry process.

The test suite and a deployment start many short- and long-lived Python processes
(brokers, agents, mirrors, Spark's Python workers importing the loader's data source, the
``logferry`` command); each pays its imports before doing any work. Per kind, this runs
``--runs`` fresh interpreters, one after another, doing what that kind does at start:

| kind | what the interpreter runs |
|---|---|
| broker | ``-m broker broker``: the command line and every module of a broker, then the "give --config" error |
| cli | ``-m broker --help``: the command line with every plugin's commands |
| client | ``import broker.client`` (an application, a dashboard) |
| agent | ``import agent.cli, agent.runtime`` (what ``python -m agent --config`` imports) |
| mirror | ``-m broker mirror``: the command line and the mirror, then the "--config" error |
| loader-source | ``import hadoop_loader.source`` (a Spark Python worker; pyspark included) |
| pyspark | the pyspark, pyarrow and numpy modules loader-source imports (the rest of it is logferry's) |

and prints per kind the median CPU (user + system, from ``getrusage(RUSAGE_CHILDREN)``;
what a busy shared machine disturbs least) and the median import time (the sum of the
top-level imports of ``-X importtime``, from a second set of runs; wall clock, so a
loaded machine inflates it). ``.pyc`` caches are
used (``PYTHONDONTWRITEBYTECODE`` is unset; one untimed run per kind writes them).

    .venv/bin/python benchmarks/process_start.py --runs 10
    .venv/bin/python benchmarks/process_start.py --kinds broker,client --runs 20

``--vs DIR`` measures this checkout (B) against the checkout DIR (A, with its own
``.venv``), alternated run by run, and prints both medians and B / A:

    .venv/bin/python benchmarks/process_start.py --vs ../old --runs 10
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
from pathlib import Path

KINDS: dict[str, list[str]] = {
    "broker": ["-m", "broker", "broker"],
    "cli": ["-m", "broker", "--help"],
    "client": ["-c", "import broker.client"],
    "agent": ["-c", "import agent.cli, agent.runtime"],
    "mirror": ["-m", "broker", "mirror"],
    "loader-source": ["-c", "import hadoop_loader.source"],
    "pyspark": ["-c", "import numpy, pyarrow, pyspark.sql.datasource, pyspark.sql.streaming.datasource"],
}
EXPECTED_EXIT = {"broker": 2, "mirror": 2}
"""Kinds that end in a usage error on purpose (no --config), once everything is imported."""

TOP_LEVEL_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (?! )")
"""A top-level line of ``-X importtime`` (its cumulative microseconds)."""


def checkout_env(checkout: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(checkout)
    return env


def run_once(checkout: Path, kind: str, importtime: bool) -> float:
    """One fresh interpreter of ``kind`` in ``checkout``: its CPU seconds, or with
    ``importtime`` the seconds its imports took (``-X importtime``'s top-level sum)."""
    python = checkout / ".venv" / "bin" / "python"
    cmd = [str(python), *(["-X", "importtime"] if importtime else []), *KINDS[kind]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        cmd, cwd=checkout, env=checkout_env(checkout), capture_output=True, text=True, timeout=120, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != EXPECTED_EXIT.get(kind, 0):
        raise SystemExit(f"process_start: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    if importtime:
        return sum(int(m[1]) for m in map(TOP_LEVEL_IMPORT.match, done.stderr.splitlines()) if m) / 1e6
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="interpreters per kind and figure (medians)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument(
        "--vs",
        type=Path,
        metavar="DIR",
        help="alternate runs of this checkout with runs of checkout DIR (each with its own .venv) "
        "and print both medians and new / old",
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kinds {', '.join(unknown)}; known: {', '.join(KINDS)}")
    here = Path(__file__).resolve().parents[1]
    sides = {"A": args.vs.resolve(), "B": here} if args.vs else {"B": here}
    for checkout in sides.values():
        if not (checkout / ".venv" / "bin" / "python").exists():
            raise SystemExit(f"process_start: {checkout}/.venv/bin/python does not exist (run `make venv` there)")
    for side, checkout in sides.items():
        print(f"{side} = {checkout}")
    figures: dict[tuple[str, str, bool], list[float]] = {}
    for kind in kinds:
        for checkout in sides.values():
            run_once(checkout, kind, importtime=False)  # writes the .pyc files
        for run in range(args.runs):
            for importtime in (False, True):
                order = list(sides) if run % 2 == 0 else list(reversed(sides))
                for side in order:
                    value = run_once(sides[side], kind, importtime)
                    figures.setdefault((side, kind, importtime), []).append(value)
            shown = "; ".join(
                f"{side} CPU {figures[(side, kind, False)][-1] * 1e3:.0f} ms, imports "
                f"{figures[(side, kind, True)][-1] * 1e3:.0f} ms"
                for side in sides
            )
            print(f"run {run + 1}: {kind:<14} {shown}", flush=True)
    print(f"\nmedians of {args.runs} fresh interpreters, in ms")
    header = f"{'kind':<14}"
    for side in sides:
        header += f" {side + ' CPU':>8} {side + ' imports':>10}"
    if len(sides) == 2:
        header += f" {'CPU B/A':>8} {'imp. B/A':>8}"
    print(header)
    for kind in kinds:
        row = f"{kind:<14}"
        med = {key: statistics.median(values) * 1e3 for key, values in figures.items() if key[1] == kind}
        for side in sides:
            row += f" {med[(side, kind, False)]:>8.0f} {med[(side, kind, True)]:>10.0f}"
        if len(sides) == 2:
            row += f" {med[('B', kind, False)] / med[('A', kind, False)]:>8.2f}"
            row += f" {med[('B', kind, True)] / med[('A', kind, True)]:>8.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
