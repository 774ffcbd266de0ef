"""``logferry load --every``'s loop without brokers or a JVM: intervals, the schedule,
one line per run, the stop flag on SIGTERM, failures that go on and ones that end it,
one session and one lake cache for every run.

The loop over real runs (a real broker, Spark, SIGTERM to a real process) is in
test_continuous_integration.py.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import hadoop_loader.job
from hadoop_loader import cli
from hadoop_loader.config import config_from_dict
from hadoop_loader.continuous import Outcome, StopFlag, describe, next_start, parse_interval, run_every
from hadoop_loader.errors import LoaderConfigError, OutputUnavailableError
from hadoop_loader.lake_cache import LakeCache
from hadoop_loader.results import LoadResult, TopicStats
from hadoop_loader.store import Recovery


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1h", 3600.0), ("2.5m", 150.0)]
)
def test_intervals(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "5 min", "-1m", "0.5s", "1d", "m"])
def test_bad_intervals_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration|at least 1s"):
        parse_interval(text)


def test_the_schedule_keeps_its_ticks_and_starts_at_once_after_a_long_run() -> None:
    assert next_start(100.0, 104.0, 10.0) == 110.0
    assert next_start(100.0, 117.5, 10.0) == 117.5  # the run took longer than the interval


def result(rows: int, sequence: int | None, duplicates: int = 0) -> LoadResult:
    stats = TopicStats(rows=rows, duplicates=duplicates)
    return LoadResult(sequence, Recovery(), {"t": stats}, [], 1.25, dedup=duplicates > 0)


def test_one_line_per_run() -> None:
    started = 1_764_468_000.0  # 2025-11-30T02:00:00Z
    assert describe(Outcome(started, result(1_500, 7, 3))) == (
        "2025-11-30T02:00:00Z run 7 committed: 1,500 rows, 3 duplicate(s) dropped in 1.2 s"
    )
    assert describe(Outcome(started, result(0, None))) == "2025-11-30T02:00:00Z nothing new (1.2 s)"
    line = describe(Outcome(started, None, OutputUnavailableError("127.0.0.1:8020 is in safe mode")))
    assert line.endswith("run failed (the next run starts from the last commit): 127.0.0.1:8020 is in safe mode")
    assert "\n" not in line


def test_sigterm_sets_the_flag_and_the_old_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = StopFlag()
    restore = stop.install()
    try:
        stop.running = True
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.event.wait(5) and stop.signals == [signal.SIGTERM] and stop.during_run
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before


def config() -> Any:
    return config_from_dict({"source": {"zk": "h:1/c", "topics": ["t"]}, "output": {"uri": "file:///tmp/x"}})


def test_the_loop_goes_on_after_a_failed_run_and_stops_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = StopFlag()
    answers: list[Any] = [result(10, 1), OutputUnavailableError("NameNode down"), result(5, 2)]
    sessions = set()
    caches = set()

    def fake_run_load(cfg: Any, session: Any = None, cache: Any = None, **_: Any) -> LoadResult:
        assert not cfg.audit.enabled  # the loop runs without the audit
        sessions.add(id(session))
        assert isinstance(cache, LakeCache)
        caches.add(id(cache))
        answer = answers.pop(0)
        if not answers:
            stop.set()  # as SIGTERM during the third run would
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(hadoop_loader.job, "run_load", fake_run_load)
    seen: list[Outcome] = []
    assert run_every(config(), 0.01, stop, seen.append) == 0
    assert [o.result.rows if o.result else str(o.error) for o in seen] == [10, "NameNode down", 5]
    assert len(sessions) == 1  # one session (one JVM) for every run
    assert len(caches) == 1  # one lake cache: a footer or manifest read once is not read again


def test_a_config_error_ends_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run_load(cfg: Any, **_: Any) -> LoadResult:
        raise LoaderConfigError("output.uri: bad")

    monkeypatch.setattr(hadoop_loader.job, "run_load", fake_run_load)
    with pytest.raises(LoaderConfigError):
        run_every(config(), 1.0, StopFlag(), lambda o: None, max_runs=3)


def test_bad_every_is_a_usage_error_saying_why(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "loader.toml"
    toml.write_text('[source]\nzk = "127.0.0.1:1/x"\ntopics = ["t"]\n[output]\nuri = "wh"\n')
    with pytest.raises(SystemExit) as exited:  # argparse: its usage, then the error line
        cli.main(["load", "--config", str(toml), "--every", "0.5s"])
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1].endswith("argument --every: must be at least 1s, got '0.5s'")
    )
    assert cli.main(["load", "--config", str(toml), "--every", "5m", "--repair"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--every: runs loads only" in lines[0], lines
