"""A group's lag history and its Burrow status reading by reading, as the console feeds
them (sans IO): StatusWindows observed once a reading, as GroupAdmin.describe does, and
the group's readings kept by console.lag_history."""

from __future__ import annotations

from broker.client import StatusWindows
from broker.client.group.status import OK, STALL, STOP, WARN
from console.lag_history import LagHistory, LagReading

KEY = ("g", "t", 0)


def statuses(commits: list[tuple[int, int, int] | None], end_at: list[int]) -> list[str]:
    """The status at each reading (one a second): ``commits[i]`` is the committed
    (offset, commit time in s) seen at reading i, or None when it is the previous one;
    ``end_at[i]`` the log end then. The lag is end - offset, as for a byte lag."""
    windows, history = StatusWindows(size=10), LagHistory(size=5)
    offset = commit_s = 0
    for i, commit in enumerate(commits):
        if commit is not None:
            offset, commit_s = commit[0], commit[1]
        lag = end_at[i] - offset
        windows.observe(KEY, offset, lag, commit_s * 1000)
        status = windows.status(KEY, i * 1000, lag).status
        history.add("g", LagReading(i * 1000, lag, lag, None, status))
    view = history.view("g")
    assert len(view["t"]) == min(len(commits), 5)
    return list(view["status"])


def test_a_consumer_that_keeps_up_is_ok():
    # commits every second, the lag rises and falls
    commits = [(i * 10, i, 0) for i in range(8)]
    ends = [i * 10 + (5 if i % 2 else 15) for i in range(8)]
    assert statuses([c[:2] for c in commits], ends) == [OK] * 5


def test_lag_growing_at_every_commit_is_warn():
    commits = [(i * 10, i) for i in range(8)]
    ends = [i * 30 + 1 for i in range(8)]  # the end runs away faster than the commits
    assert statuses(commits, ends) == [WARN] * 5


def test_a_consumer_that_stops_committing_is_stop_once_silent_longer_than_its_window():
    # four commits over 3 s, then none while the end grows: STOP once silent over 3 s
    commits = [(i * 10, i) if i < 4 else None for i in range(10)]
    ends = [i * 10 + 5 if i < 4 else 100 + i for i in range(10)]
    # readings 1-6: the lag never fell (WARN); 7 on: silent for more than the 3 s span
    assert statuses(commits, ends) == [WARN, WARN, STOP, STOP, STOP]
    windows = StatusWindows(size=10)
    for i in range(4):
        windows.observe(KEY, i * 10, 5, i * 1000)
    assert windows.status(KEY, 6_000, 80).status != STOP  # silent 3 s = the span: not yet
    assert windows.status(KEY, 6_001, 80).status == STOP


def test_the_same_offset_committed_again_and_again_is_stall():
    # a Kafka-style committer re-commits its position each second without moving
    commits = [(50, i) for i in range(8)]
    ends = [100] * 8
    assert statuses(commits, ends) == [STALL] * 5


def test_history_keeps_the_last_readings_and_since_when_the_status_holds():
    history = LagHistory(size=3)
    for t, status in enumerate([OK, OK, WARN, WARN, WARN]):
        history.add("g", LagReading(t * 1000, t, t * 10, float(t), status))
    history.add("g", LagReading(3_000, 99, 99, None, STOP))  # not newer: ignored
    view = history.view("g")
    assert view["t"] == [2_000, 3_000, 4_000] and view["lag_messages"] == [2, 3, 4]
    assert view["status"] == [WARN] * 3 and view["status_since_ms"] == 2_000
    history.add("g", LagReading(5_000, 0, 0, 0.0, OK))
    assert history.view("g")["status_since_ms"] == 5_000
    history.add("other", LagReading(0, 0, 0, None, OK))
    history.forget(["other"])
    assert history.view("g") == {
        "t": [],
        "lag_messages": [],
        "lag_bytes": [],
        "lag_s": [],
        "status": [],
        "status_since_ms": None,
    }
    assert history.view("other")["t"] == [0]
