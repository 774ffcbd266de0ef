"""Fixtures for the consumer-group tests: members in their own processes, and checks.

``group_members`` starts ``tests/groups/member.py`` processes (see its docstring for
what they record), always kills them after the test and, when a test fails, prints
each member's log tail. The checks below read what the members recorded:

- :func:`assert_consumed_all` - every produced value was consumed (and, unless a
  crash allows it, exactly once);
- :func:`assert_no_overlap` - per partition, the ownership intervals of different
  members (``assign`` to ``revoke``; a killed member's end at its kill) never
  overlap, and every message was consumed inside its consumer's interval.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from broker.client import Admin, Producer
from broker.testing import prefork
from tests.support.waiting import wait_until

MEMBER_MODULE = "tests.groups.member"
ROOT = Path(__file__).resolve().parents[2]


class Record(NamedTuple):
    """One consumed message as a member recorded it."""

    member: str
    topic: str
    partition: int
    offset: int
    index: int
    value: int
    time: float


class MemberProcess:
    """One member subprocess and the files it writes."""

    def __init__(self, name: str, out: Path, argv: list[str]):
        self.name = name
        self.out = out
        self.log_path = out / f"{name}.log"
        self.killed_at: float | None = None
        with self.log_path.open("ab") as log:  # from the worker's fork server (broker.testing.prefork)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            args = [*argv, "--name", name, "--out", str(out)]
            self.proc = prefork.start_module(MEMBER_MODULE, args, log, env, ROOT)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: the member closes cleanly (commit, release, deregister)."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"member {self.name} ignored SIGTERM:\n{self.log_tail()}") from None
        assert code == 0, f"member {self.name} exited with {code}:\n{self.log_tail()}"

    def kill(self) -> float:
        """kill -9; returns the time just before the signal."""
        self.killed_at = time.time()
        self.proc.kill()
        self.proc.wait(10)
        return self.killed_at

    def expire_session(self) -> None:
        """Ask the member to expire its own ZooKeeper session."""
        self.proc.send_signal(signal.SIGUSR1)

    def records(self) -> list[Record]:
        path = self.out / f"{self.name}.records"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 6:
                out.append(
                    Record(
                        self.name, parts[0], int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]), float(parts[5])
                    )
                )
        return out

    def events(self) -> list[list[str]]:
        path = self.out / f"{self.name}.events"
        return [line.split(" ", 3) for line in path.read_text().splitlines()] if path.exists() else []

    def is_ready(self) -> bool:
        return any(e[0] == "ready" for e in self.events())

    def owned(self) -> set[tuple[str, int]]:
        """Partitions currently assigned according to the callbacks."""
        owned: set[tuple[str, int]] = set()
        for event in self.events():
            if event[0] == "assign":
                owned.add((event[1], int(event[2])))
            elif event[0] == "revoke":
                owned.discard((event[1], int(event[2])))
        return owned

    def closed_metrics(self) -> dict:
        """The metrics the member printed when it closed ({} if it did not)."""
        path = self.out / f"{self.name}.events"
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.startswith("closed "):
                return json.loads(line.split(" ", 2)[2])
        return {}

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@pytest.fixture
def group_members(tmp_path: Path, request) -> Iterator[Callable[..., MemberProcess]]:
    """Factory: ``start(name, zk=, group=, topics=, **options) -> MemberProcess``."""
    out = tmp_path / "members"
    out.mkdir()
    started: list[MemberProcess] = []

    def start(
        name: str,
        *,
        zk: str,
        group: str,
        topics: list[str],
        api: str = "iter",
        start: str = "earliest",
        session_timeout: float = 4.0,
        auto_commit_ms: int = 1000,
        streams: int = 1,
        max_bytes: int = 256 * 1024,
    ) -> MemberProcess:
        argv = [
            "--zk",
            zk,
            "--group",
            group,
            "--topics",
            ",".join(topics),
            "--api",
            api,
            "--start",
            start,
            "--session-timeout",
            str(session_timeout),
            "--auto-commit-ms",
            str(auto_commit_ms),
            "--streams",
            str(streams),
            "--max-bytes",
            str(max_bytes),
        ]
        member = MemberProcess(name, out, argv)
        started.append(member)
        return member

    yield start
    for member in started:
        if member.running():
            member.proc.kill()
            member.proc.wait(10)
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for member in started:
            print(f"--- member {member.name} ({member.log_path}) ---\n{member.log_tail()}")


# -- helpers ---------------------------------------------------------------------------------


wait_for = functools.partial(wait_until, interval=0.1)
"""The suite's wait_until (tests.support.waiting), polling every 0.1 s."""


def create_topic(zk: str, topic: str, partitions: int) -> None:
    with Admin(zk=zk) as admin:
        admin.create_topic(topic, partitions)


def produce(
    where: str | list[str], topic: str, values: range, partitions: int, chunk: int = 500, pause: float = 0.0
) -> None:
    """Send ``b"%d" % v`` for each value, value ``v`` to partition ``v % partitions``.

    ``where`` is a ZooKeeper connect string, or a list of brokers (to produce while
    ZooKeeper is down). ``chunk`` values per partition go out per ``send`` (one
    batch); with ``pause`` the producer sleeps between rounds so consumption overlaps
    production.
    """
    target = {"brokers": where} if isinstance(where, list) else {"zk": where}
    with Producer(**target, linger_ms=2) as producer:
        start = values.start
        while start < values.stop:
            stop = min(start + chunk * partitions, values.stop)
            per_partition: dict[int, list[bytes]] = defaultdict(list)
            for v in range(start, stop):
                per_partition[v % partitions].append(b"%d" % v)
            for p, vals in per_partition.items():
                producer.send(topic, vals, partition=p)
            start = stop
            if pause:
                producer.flush(30)
                time.sleep(pause)
        producer.flush(60)


def all_records(members: list[MemberProcess]) -> list[Record]:
    return [r for m in members for r in m.records()]


def consumed_values(members: list[MemberProcess]) -> set[int]:
    return {r.value for r in all_records(members)}


def assert_consumed_all(records: list[Record], expected: range, allow_duplicates: bool = False) -> Counter:
    """Every expected value consumed; returns the duplicate counts (value -> extra copies)."""
    counts = Counter(r.value for r in records)
    missing = [v for v in expected if v not in counts]
    assert not missing, f"{len(missing)} messages never consumed, e.g. {missing[:10]}"
    unexpected = set(counts) - set(expected)
    assert not unexpected, f"consumed values never produced: {sorted(unexpected)[:10]}"
    duplicates = Counter({v: c - 1 for v, c in counts.items() if c > 1})
    if not allow_duplicates:
        assert not duplicates, f"{len(duplicates)} messages consumed more than once, e.g. {sorted(duplicates)[:10]}"
    return duplicates


def ownership_intervals(members: list[MemberProcess]) -> dict[tuple[str, int], list[tuple[float, float, str]]]:
    """``{tp: [(start, end, member)]}`` from assign/revoke events; open ends at kill or +inf."""
    intervals: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for member in members:
        open_at: dict[tuple[str, int], float] = {}
        for event in member.events():
            if event[0] in ("assign", "revoke"):
                tp = (event[1], int(event[2]))
                when = float(event[3])
                if event[0] == "assign":
                    assert tp not in open_at, f"{member.name} assigned {tp} twice without a revoke"
                    open_at[tp] = when
                else:
                    assert tp in open_at, f"{member.name} revoked {tp} it was not assigned"
                    intervals[tp].append((open_at.pop(tp), when, member.name))
        end = member.killed_at if member.killed_at is not None else float("inf")
        for tp, when in open_at.items():
            intervals[tp].append((when, end, member.name))
    return intervals


def assert_no_overlap(members: list[MemberProcess]) -> dict:
    """No two members own a partition at once; each message consumed while owned."""
    intervals = ownership_intervals(members)
    for tp, spans in intervals.items():
        spans.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in zip(spans, spans[1:], strict=False):
            assert s2 >= e1, (
                f"{tp}: {m1} owned it until {e1:.3f} but {m2} claimed it at "
                f"{s2:.3f} ({(e1 - s2) * 1000:.0f} ms overlap)"
            )
    for record in all_records(members):
        spans = intervals.get((record.topic, record.partition), [])
        assert any(m == record.member and s <= record.time <= e for s, e, m in spans), (
            f"{record.member} consumed {record} outside its ownership of that partition"
        )
    return intervals
