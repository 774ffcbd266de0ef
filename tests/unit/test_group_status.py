"""Burrow's rules on windows of commits (broker.client.group.status), sans IO."""

from broker.client import Observation, StatusWindows, group_status, partition_status
from broker.client.group.status import OK, REWIND, STALL, STOP, WARN


def obs(*rows):
    """(offset, lag, seconds) rows -> observations."""
    return [Observation(o, lag, int(t * 1000)) for o, lag, t in rows]


def test_empty_and_single_commit_are_ok():
    assert partition_status([], 1000).status == OK
    one = partition_status(obs((10, 50, 0)), 100_000, size=10)
    assert one.status == OK and one.complete == 0.1


def test_caught_up_now_is_ok_whatever_the_window():
    window = obs((0, 100, 0), (0, 100, 5), (0, 100, 10))
    assert partition_status(window, 10_000, current_lag=0).status == OK


def test_lag_zero_somewhere_in_the_window_is_ok():
    window = obs((0, 0, 0), (10, 20, 5), (20, 30, 10))
    assert partition_status(window, 11_000).status == OK


def test_stop_when_silent_longer_than_the_window_spans():
    window = obs((0, 100, 0), (10, 100, 5), (20, 100, 10))
    assert partition_status(window, 21_000).status == STOP
    assert partition_status(window, 19_000).status != STOP


def test_stop_is_judged_before_the_zero_lag_rule():
    window = obs((0, 0, 0), (10, 0, 5))
    assert partition_status(window, 60_000, current_lag=500).status == STOP


def test_rewind_when_an_offset_goes_back():
    window = obs((100, 50, 0), (50, 100, 5), (60, 90, 10))
    assert partition_status(window, 11_000).status == REWIND


def test_stall_when_commits_repeat_the_same_offset():
    window = obs((100, 50, 0), (100, 60, 5), (100, 70, 10))
    assert partition_status(window, 11_000).status == STALL


def test_warn_when_moving_but_lag_never_falls():
    window = obs((100, 50, 0), (110, 50, 5), (120, 60, 10))
    assert partition_status(window, 11_000).status == WARN


def test_ok_when_lag_falls_once():
    window = obs((100, 50, 0), (110, 70, 5), (150, 40, 10))
    assert partition_status(window, 11_000).status == OK


def test_window_keeps_the_newest_commits_only():
    window = obs((100, 0, 0), *[(100 + i, 10 + i, i) for i in range(1, 11)])
    assert partition_status(window, 10_500, size=10).status == WARN  # the zero lag fell out
    assert partition_status(window, 10_500, size=11).status == OK


def test_group_status_is_the_worst():
    assert group_status([]) == OK
    assert group_status([OK, WARN, OK]) == WARN
    assert group_status([WARN, STOP, REWIND, STALL]) == STOP


def test_windows_record_each_commit_once():
    windows = StatusWindows(size=3)
    for _ in range(3):
        windows.observe(("t", 0), 100, 40, 1000)
    assert len(windows.window(("t", 0))) == 1
    for i in range(1, 6):
        windows.observe(("t", 0), 100 + i, 40 + i, 1000 + i * 1000)
    window = windows.window(("t", 0))
    assert [o.offset for o in window] == [103, 104, 105]
    assert windows.status(("t", 0), 6500).status == WARN
    windows.forget([("t", 1)])
    assert windows.window(("t", 0)) == []
