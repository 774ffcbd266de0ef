"""Where a command's CPU goes, by kind of process: run it, sample ``/proc`` each second.

``getrusage`` sees only the children a process waited for, and a test run's JVMs
(Spark's, ZooKeeper's) are often not waited for, so ``time make test`` and
``tests/support/cost.py`` undercount them. This samples every process on the machine
once a second while the command runs, keeps each one's last CPU time, and sums them by
kind (broker, Spark driver JVM, Spark's Python workers, ZooKeeper, the pytest workers,
...). Processes that live less than a second are missed, and so is a process's last
second; processes that were running before the command started are left out.

    .venv/bin/python -m tests.support.cpu_by_process make test

prints one line per kind, the total, the command's wall time and its exit status, the
share of the machine's CPUs busy in each 30 s (where the run waits), and exits with the
command's status; ``LOGFERRY_CPU_DETAIL=FILE`` also writes every process to FILE.
Another job on the machine shows up in the figures (as ``other``): measure on a quiet
machine, or, on a shared one, with ``LOGFERRY_CPU_OWN=1``: then only the command and
its descendants count (a process whose parent was one when it was sampled; one that
lives less than a second between two samples is missed, as above).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")

KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ZooKeeper JVM", ("java", "zookeeper")),
    ("Spark standalone daemon JVM", ("java", "deploy.master")),
    ("Spark standalone daemon JVM", ("java", "deploy.worker")),
    ("Spark executor JVM", ("java", "CoarseGrainedExecutorBackend")),
    ("Spark driver JVM", ("java", "spark")),
    ("other JVM", ("java",)),
    ("Spark Python worker", ("pyspark.daemon",)),
    ("Spark Python worker", ("pyspark.worker",)),
    ("broker", ("-m broker broker",)),
    ("mirror", ("-m broker mirror",)),
    ("agent", ("-m broker agent",)),
    ("loader (own process)", ("hadoop_loader",)),
    ("fork server", ("broker.testing.prefork",)),
    ("pytest worker", ("exec(eval(sys.stdin.readline()))",)),
    ("pytest", ("pytest",)),
    ("other logferry command", ("-m broker",)),
    ("other logferry command", ("logferry",)),
    ("chromium", ("chrom",)),
    ("node (kafkajs)", ("node",)),
    ("lint", ("mypy",)),
    ("lint", ("ruff",)),
    ("lint", ("lint-imports",)),
    ("other Python", ("python",)),
)
"""The first kind whose words all appear in a process's command line names it."""


def kind_of(command: str) -> str:
    """The kind of a process, from its command line."""
    for kind, words in KINDS:
        if all(word in command for word in words):
            return kind
    return "other"


def _stat(pid: str) -> tuple[tuple[int, int], float] | None:
    """``((pid, start time), cpu seconds)`` of a process, None if it is gone."""
    found = _stat_and_parent(pid)
    return None if found is None else found[:2]


def _stat_and_parent(pid: str) -> tuple[tuple[int, int], float, int] | None:
    """``((pid, start time), cpu seconds, parent pid)`` of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(pid), int(fields[19])), (int(fields[11]) + int(fields[12])) / TICKS, int(fields[1])


def _command(pid: int) -> str:
    """Its command line; for a child of a fork server (``broker.testing.prefork``), which
    shows the server's, the command it runs (``lf-broker`` in its name: ``-m broker broker``)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
        if "broker.testing.prefork" in command:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            if name.startswith("lf-"):
                return f"python -m broker {name[3:]} (forked)"
        return command
    except OSError:
        return ""


def sample(seen: dict[tuple[int, int], list], before: set[tuple[int, int]], family: set[int] | None = None) -> None:
    """Record each process's CPU so far and its latest command line (a fork shows its
    parent's until it execs). ``family``: only the processes whose parent is in it (the
    command's pid to begin with), added to it as they are found."""
    stats = [stat for pid in os.listdir("/proc") if pid.isdigit() and (stat := _stat_and_parent(pid)) is not None]
    for key, cpu, parent in sorted(stats, key=lambda stat: stat[0][1]):  # parents start before children
        if key in before:
            continue
        if family is not None:
            if key[0] not in family and parent not in family:
                continue
            family.add(key[0])
        command = _command(key[0])
        entry = seen.setdefault(key, [cpu, command])
        entry[0] = max(entry[0], cpu)
        if command:
            entry[1] = command


DETAIL_ENV = "LOGFERRY_CPU_DETAIL"
"""A file to write every process into (CPU, kind, command line; most CPU first)."""
OWN_ENV = "LOGFERRY_CPU_OWN"
"""``1``: count only the command and its descendants (see the module)."""
PERIOD_S = 30.0
"""How often the whole machine's busy share is taken (from /proc/stat): where a run idles."""


def _machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def _share(first: tuple[int, int], second: tuple[int, int]) -> float:
    total = second[1] - first[1]
    return 100.0 * (second[0] - first[0]) / total if total else 0.0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.support.cpu_by_process COMMAND [ARGS...]", file=sys.stderr)
        return 2
    before = {stat[0] for pid in os.listdir("/proc") if pid.isdigit() and (stat := _stat(pid)) is not None}
    seen: dict[tuple[int, int], list] = {}
    started = time.monotonic()
    busy = [_machine_busy()]
    process = subprocess.Popen(argv)
    family = {process.pid} if os.environ.get(OWN_ENV) == "1" else None
    while process.poll() is None:
        sample(seen, before, family)
        time.sleep(1.0)
        if time.monotonic() - started >= PERIOD_S * len(busy):
            busy.append(_machine_busy())
    busy.append(_machine_busy())
    wall = time.monotonic() - started
    by_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for cpu, command in seen.values():
        by_kind[kind_of(command)] += cpu
        count[kind_of(command)] += 1
    detail = os.environ.get(DETAIL_ENV)
    if detail:
        with open(detail, "w") as out:
            for cpu, command in sorted(seen.values(), key=lambda entry: -entry[0]):
                out.write(f"{cpu:.1f}\t{kind_of(command)}\t{command[:400]}\n")
    for kind, cpu in by_kind.most_common():
        print(f"{cpu:8.0f} s CPU  {count[kind]:5d} processes  {kind}")
    print(f"{sum(by_kind.values()):8.0f} s CPU in all, {wall:.0f} s wall, exit status {process.returncode}")
    shares = [_share(a, b) for a, b in zip(busy, busy[1:], strict=False)]
    print(f"the machine's CPUs busy, each {PERIOD_S:.0f} s (%): " + " ".join(f"{share:.0f}" for share in shares))
    return process.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
