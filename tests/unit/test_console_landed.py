"""The console's landed tier (console/landed.py) and its [[lake]] settings, sans IO."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo

import pytest

from broker.client import AuditRecord
from broker.common.errors import ConfigError
from console.audit import AuditTally
from console.config import from_zk, parse_config
from console.landed import LakeReader, hour_state, landed_row, merge_tiers

HOUR = 3600_000
T0 = 1_709_251_200_000  # 2024-03-01T00:00Z
UTC = dt.UTC
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def manifest(hours: dict, duplicates: dict | None = None, committed: int = T0, started: int | None = None) -> dict:
    return {
        "format": "logferry-manifest/1",
        "sequence": 1,
        "started_ms": committed if started is None else started,
        "committed_ms": committed,
        "hours": hours,
        **({"duplicates": duplicates} if duplicates else {}),
    }


def test_manifests_add_up_and_hours_compare_with_the_last_tier_before_landed():
    lake = LakeReader("lake", "file:///nowhere", "analysis")
    lake.add(manifest({"app": {"2024-03-01T00": 70}}))
    lake.add(
        manifest(
            {"app": {"2024-03-01T00": 20, "2024-03-01T01": 5}},
            {"app": {"2024-03-01T00": 10}},
            committed=T0 + HOUR + 90_000,
            started=T0 + HOUR + 60_000,
        )
    )
    tiers = {
        ("app", T0): {"agent": 60, "mirror": 60},  # two windows of hour 00
        ("app", T0 + 1800_000): {"agent": 40, "mirror": 40},
        ("app", T0 + HOUR): {"agent": 10, "mirror": 8},
        ("other", T0): {"agent": 5},
    }  # not landed in this lake: not shown
    rows = lake.rows(tiers)
    assert rows == [
        {
            "topic": "app",
            "hour": "2024-03-01T01",
            "landed": 5,
            "duplicates": 0,
            "of": "mirror",
            "expected": 8,
            "complete_pct": 62.5,
            "state": "open",  # the last run started as it ended: its rest lands next run
        },
        {
            "topic": "app",
            "hour": "2024-03-01T00",
            "landed": 90,
            "duplicates": 10,
            "of": "mirror",
            "expected": 100,
            "complete_pct": 100.0,
            "state": "settled",  # ended a settle time before the last run started
        },
    ]
    assert (lake.runs, lake.last_committed_ms, lake.last_started_ms) == (2, T0 + HOUR + 90_000, T0 + HOUR + 60_000)


def test_an_hour_is_judged_once_it_ended_and_settled_before_the_last_run_started():
    # a nightly load at 02:15 judges every hour of the day before and leaves 02 open
    night = T0 + 26 * HOUR + 15 * 60_000  # 2024-03-02T02:15Z
    assert hour_state("2024-03-01T23", UTC, night, 60) == "settled"
    assert hour_state("2024-03-02T01", UTC, night, 60) == "settled"
    assert hour_state("2024-03-02T02", UTC, night, 60) == "open"
    # the settle time counts: an hour that ended 30 s before the run is open with 60 s
    assert hour_state("2024-03-02T01", UTC, T0 + 26 * HOUR + 30_000, 60) == "open"
    assert hour_state("2024-03-02T01", UTC, T0 + 26 * HOUR + 30_000, 10) == "settled"
    # hours in the loader's zone: Paris's 01 ended at 01:00 UTC
    assert hour_state("2024-03-01T01", PARIS, T0 + HOUR + 60_000, 60) == "settled"
    # no run yet: nothing judged
    assert hour_state("2024-03-01T00", UTC, 0, 60) == "open"


def test_hours_follow_the_loaders_time_zone():
    lake = LakeReader("lake", "/x", "live", timezone="Europe/Paris")  # UTC+1 in March
    lake.add(manifest({"app": {"2024-03-01T01": 3}}))
    (row,) = lake.rows({("app", T0): {"agent": 3}})
    assert (row["hour"], row["of"], row["complete_pct"]) == ("2024-03-01T01", "agent", 100.0)


def test_an_hour_without_a_tier_before_or_without_rows():
    assert landed_row("t", "h", 5, 0, {})["complete_pct"] is None
    assert landed_row("t", "h", 0, 0, {"agent": 4})["complete_pct"] == 0.0
    assert landed_row("t", "h", 6, 0, {"agent": 4})["complete_pct"] == 150.0  # copies


def test_manifests_of_another_format_are_refused():
    with pytest.raises(ValueError, match="format"):
        LakeReader("lake", "/x", "live").add({"format": "something/2"})


def test_lake_reads_manifests_once_from_a_directory(tmp_path):
    directory = tmp_path / "_logferry" / "manifests"
    directory.mkdir(parents=True)
    lake = LakeReader("lake", tmp_path.as_uri(), "live")
    lake.poll()
    assert lake.runs == 0 and lake.error is None
    (directory / f"{1:020d}.json").write_text(json.dumps(manifest({"a": {"2024-03-01T00": 2}})))
    lake.poll()
    lake.poll()
    (directory / f"{2:020d}.json").write_text("{not json")
    lake.poll()
    assert lake.landed == {("a", "2024-03-01T00"): 2} and lake.runs == 1
    assert "00000000000000000002.json" in lake.error
    missing = LakeReader("l", str(tmp_path / "no"), "live")
    missing.poll()
    assert "does not exist" in missing.error


def test_tiers_come_from_the_cluster_each_stage_publishes_to():
    live, analysis = AuditTally(), AuditTally()
    live.add(AuditRecord("app", T0, T0 + HOUR, 10, 10, "web-1"))
    analysis.add(AuditRecord("app", T0, T0 + HOUR, 10, 10, "web-1"))  # the mirror's copy
    analysis.add(AuditRecord("app", T0, T0 + HOUR, 10, 10, "web-1"))  # copied twice
    analysis.add(AuditRecord("app", T0, T0 + HOUR, 10, 9, "m", "mirror"))
    assert merge_tiers([("live", live.totals), ("analysis", analysis.totals)]) == {
        ("app", T0): {"agent": 10, "mirror": 9}
    }


def test_lake_settings():
    config = parse_config(
        {
            "cluster": [{"name": "live", "zk_connect": "zk:2181/l"}, {"name": "analysis", "zk_connect": "zk:2181/a"}],
            "lake": [
                {"path": "/data/lake"},
                {"path": "/data/b", "cluster": "live", "timezone": "Europe/Paris", "name": "b"},
            ],
        }
    )
    assert [(lk.name, lk.path, lk.cluster, lk.timezone) for lk in config.lakes] == [
        ("lake", "/data/lake", "analysis", "UTC"),
        ("b", "/data/b", "live", "Europe/Paris"),
    ]
    zk = from_zk(["live=zk:2181/l", "analysis=zk:2181/a"], lakes=["/data/x", "live=/data/y"])
    assert [(lk.path, lk.cluster) for lk in zk.lakes] == [("/data/x", "analysis"), ("/data/y", "live")]


@pytest.mark.parametrize(
    "lake, error",
    [
        ({"path": "/x", "cluster": "nope"}, "lake[0].cluster"),
        ({"path": "/x", "timezone": "Mars/Olympus"}, "lake[0].timezone"),
        ({"cluster": "live"}, "lake[0].path"),
    ],
)
def test_lake_errors_name_the_key(lake, error):
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"cluster": [{"name": "live", "zk_connect": "zk:2181/l"}], "lake": [lake]})
