"""The console's sans-IO parts: settings, rates, agent record decoding, its metrics."""

from __future__ import annotations

import argparse
import datetime as dt
from types import SimpleNamespace

import msgpack
import pytest

from broker.common.errors import ConfigError
from console.cli import config_from_args
from console.collector import ClusterPoller
from console.config import from_zk, parse_config
from console.messages import MessageStart, page_record, parse_start
from console.metrics import console_metrics
from console.rates import History, MessagePositions, Rates


def test_config_from_toml_tables():
    config = parse_config(
        {
            "console": {"port": 0, "interval_s": 0.5},
            "cluster": [
                {"name": "live", "zk_connect": "zk:2181/logferry/live"},
                {"name": "analysis", "zk_connect": "zk:2181/logferry/analysis"},
            ],
        }
    )
    assert [c.name for c in config.clusters] == ["live", "analysis"]
    assert (config.host, config.port, config.interval_s) == ("127.0.0.1", 0, 0.5)


@pytest.mark.parametrize(
    "doc, error",
    [
        ({}, "cluster: missing"),
        ({"cluster": [{"name": "a"}]}, "cluster[0].zk_connect: missing"),
        ({"cluster": [{"name": "a", "zk_connect": "zk:2181/x"}, {"name": "a", "zk_connect": "zk:2181/y"}]}, "a twice"),
        ({"cluster": [{"name": "a", "zk_connect": "zk:2181/x"}], "console": {"interval_s": 5}}, "at most 2"),
        ({"cluster": [{"name": "a", "zk_connect": "zk:2181/x"}], "console": {"prot": 1}}, "did you mean 'port'"),
    ],
)
def test_config_errors_name_the_key(doc, error):
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_config(doc)


def test_zk_options_name_clusters_by_chroot_or_prefix():
    config = from_zk(["127.0.0.1:2181/logferry/live", "dc2=127.0.0.1:2181/logferry/analysis"])
    assert [(c.name, c.zk_connect) for c in config.clusters] == [
        ("live", "127.0.0.1:2181/logferry/live"),
        ("dc2", "127.0.0.1:2181/logferry/analysis"),
    ]


def test_cli_overrides_and_refusals():
    args = argparse.Namespace(config=None, zk=["zk:2181/logferry/live"], host=None, port=0, interval=None)
    config = config_from_args(args)
    assert (config.host, config.port, config.interval_s) == ("127.0.0.1", 0, 1.0)
    with pytest.raises(ConfigError, match="--config FILE or --zk"):
        config_from_args(argparse.Namespace(config=None, zk=None, host=None, port=None, interval=None))
    with pytest.raises(ConfigError, match="at most 2"):
        config_from_args(argparse.Namespace(config=None, zk=["zk:2181/x"], host=None, port=None, interval=3))


def test_rates_per_second_and_no_negative_rate():
    rates = Rates()
    assert rates.update("k", 100, 10.0) == 0.0
    assert rates.update("k", 300, 12.0) == 100.0
    assert rates.update("k", 50, 13.0) == 0.0  # went backwards: re-created, no rate
    rates.forget([])
    assert rates.get("k") == 0.0


def test_rates_over_a_trailing_window():
    rates = Rates(window_s=5.0)
    for t in range(10):  # 100 a second, and one reading late by 0.4 s
        rates.update("k", 100 * t, t + (0.4 if t == 8 else 0.0))
    assert rates.window("k") == (4.0, 9.0)  # the newest reading at least 5 s old, and the last
    assert rates.get("k") == 100.0  # the late reading moved nothing


def test_message_positions_count_lag_where_an_end_was_seen_and_estimate_between():
    seen = MessagePositions()
    seen.add("p", 1000, 10)
    seen.add("p", 3000, 110)  # small messages after large ones
    assert seen.message_at("p", 1000) == (10, True)
    assert seen.message_at("p", 3000) == (110, True)
    assert seen.message_at("p", 2000) == (60, False)  # between two seen ends: placed by bytes
    assert seen.message_at("p", 500) is None and seen.message_at("q", 1000) is None
    seen.add("p", 200, 2)  # re-created: the old ends mean nothing
    assert seen.message_at("p", 1000) is None
    seen.forget([])
    assert seen.message_at("p", 200) is None


def test_time_lag_is_the_age_of_the_oldest_unread_message_by_arrival():
    seen = MessagePositions()
    seen.add("p", 1000, 10, now=100.0)
    seen.add("p", 1000, 10, now=101.0)  # the same end: its first sighting stays
    seen.add("p", 3000, 110, now=105.0)
    seen.add("p", 4000, 150, now=109.0)
    assert seen.behind_s("p", 4000, 110.0) == (0.0, True)  # consumed everything
    assert seen.behind_s("p", 1000, 110.0) == (5.0, True)  # the bytes after 1000 came by 105
    assert seen.behind_s("p", 3500, 110.0) == (1.0, True)
    assert seen.behind_s("p", 500, 110.0) == (10.0, False)  # before the history: at least
    assert seen.behind_s("q", 0, 110.0) is None


def test_history_keeps_the_newest_points():
    history = History(["a"], size=2)
    for t in range(3):
        history.add(t, a=t * 1.5)
    assert history.as_dict() == {"t": [1, 2], "a": [1.5, 3.0]}


def test_agent_records_are_decoded_and_others_are_not():
    record = {"time": 1, "host": "web-1", "file": "/var/log/app.log", "offset": 0, "line": "hello"}
    assert page_record(msgpack.packb(record))["host"] == "web-1"
    assert page_record(b"plain text") is None
    assert page_record(msgpack.packb({"line": "no host"})) is None
    # bytes inside a record reach the page as text
    binary = page_record(msgpack.packb({**record, "fields": b"k=\xff"}, use_bin_type=True))
    assert binary["fields"] == "k=\ufffd"


def test_browse_start():
    assert parse_start(None, None) == "earliest"
    assert parse_start("latest", None) == "latest"
    assert parse_start("1234", None) == 1234
    assert parse_start("9", "1700000000000") == dt.datetime.fromtimestamp(1_700_000_000, tz=dt.UTC)
    with pytest.raises(ValueError):
        parse_start("-1", None)
    # a message offset, as Kafka clients number messages; a time still wins
    assert parse_start(None, None, "17") == MessageStart(17)
    assert parse_start(None, "1700000000000", "17") == dt.datetime.fromtimestamp(1_700_000_000, tz=dt.UTC)
    for bad in ("-1", "x"):
        with pytest.raises(ValueError):
            parse_start(None, None, bad)


def test_console_metrics_from_readings():
    readings = [
        {
            "name": "live",
            "ok": True,
            "summary": {"brokers_up": 2, "under_replicated": 3, "offline": 1},
            "groups": [{"name": "dash", "status": "STOP", "lag_bytes": 42}],
        },
        {"name": "analysis", "ok": False},
    ]
    text = console_metrics(lambda: readings).render()
    assert 'logferry_console_group_status{cluster="live",group="dash"} 4.0' in text
    assert 'logferry_console_under_replicated_partitions{cluster="live"} 3.0' in text
    assert 'logferry_console_cluster_up{cluster="analysis"} 0.0' in text


def test_audit_tally_adds_hosts_and_judges_later_stages_against_the_agents():
    from broker.client import AuditRecord
    from console.audit import AuditTally

    tally = AuditTally(max_windows=2)
    for host in ("web-1", "web-2"):
        tally.add(AuditRecord("app", 0, 60_000, 100, 100, host))
    tally.add(AuditRecord("app", 0, 60_000, 10, 10, "web-1"))  # a restarted agent: counts add up
    tally.add(AuditRecord("app", 0, 60_000, 0, 220, "", "mirror"))
    tally.add(AuditRecord("app", 60_000, 120_000, 50, 40, "web-1"))
    tally.add(AuditRecord("app", 120_000, 180_000, 5, 5, "web-1"))  # pushes window 0 out
    rows = tally.rows()
    assert [r["window_start"] for r in rows] == [120_000, 60_000]
    assert rows[1]["stages"]["agent"] == {"sent": 50, "acked": 40, "complete_pct": 80.0}

    tally = AuditTally()
    for host in ("web-1", "web-2"):
        tally.add(AuditRecord("app", 0, 60_000, 100, 100, host))
    tally.add(AuditRecord("app", 0, 60_000, 0, 220, "", "mirror"))
    (row,) = tally.rows()
    assert row["hosts"] == 2
    assert row["stages"]["mirror"]["complete_pct"] == 110.0  # duplicates show above 100%


def test_a_down_broker_keeps_what_it_was_and_a_silent_cluster_turns_stale():
    poller = ClusterPoller(from_zk(["live=zk:2181/x"]).clusters[0])
    up = {1: SimpleNamespace(host="h1", port=9092, rack="r1", datacenter="dc1")}
    rows = poller._brokers([1], up, 1, {1: 4}, {}, now_ms=1_000)
    assert rows[0]["up"] and rows[0]["down_since_ms"] is None
    rows = poller._brokers([1], {}, None, {}, {}, now_ms=2_000)
    rows = poller._brokers([1], {}, None, {}, {}, now_ms=3_000)  # since the first reading that missed it
    assert (rows[0]["host"], rows[0]["rack"], rows[0]["datacenter"], rows[0]["down_since_ms"]) == (
        "h1",
        "r1",
        "dc1",
        2_000,
    )
    never_seen = poller._brokers([2], {}, None, {}, {}, now_ms=3_000)[0]
    assert (never_seen["host"], never_seen["down_since_ms"]) == (None, None)

    assert poller.view(0, 2_000)["stale"] and not poller.view(0, 2_000).get("read")  # never read
    poller.good = poller.last = {"name": "live", "ok": True, "error": None, "time_ms": 10_000, "answered_ms": 10_500}
    assert not poller.view(12_500, 2_000)["stale"]
    poller.last = {"name": "live", "ok": False, "error": "timed out"}
    view = poller.view(12_501, 2_000)
    assert (view["stale"], view["ok"], view["error"], view["as_of_ms"], view["read"]) == (
        True,
        False,
        "timed out",
        10_000,
        True,
    )


def test_a_missing_topic_or_partition_is_named():
    from console.server import _missing

    poller = ClusterPoller(from_zk(["live=zk:2181/x"]).clusters[0])
    assert _missing(poller, "web", 0) is None  # nothing read yet: the broker answers
    poller.good = {"topics": [{"name": "web", "partitions": [{"partition": 0}, {"partition": 1}]}]}
    assert _missing(poller, "web", 1) is None
    assert _missing(poller, "nope", 0) == "topic 'nope' does not exist in cluster 'live' (it has 1 topics)"
    assert _missing(poller, "web", 5) == "topic 'web' has no partition 5: its partitions are 0-1"


def test_a_reading_cut_short_by_the_console_stopping_ends_quietly(caplog, monkeypatch):
    """The console's shutdown closes a cluster's clients while that cluster's reading may
    still run in its thread: the reading then fails however it fails (an assertion on a
    client set to None, a closed socket) and must end without a warning or a traceback,
    keeping the last reading; before the shutdown the same failure is reported."""
    poller = ClusterPoller(from_zk(["live=zk:2181/x"]).clusters[0])
    monkeypatch.setattr(poller, "_connect", lambda: None)

    def read_while_stopping() -> dict:
        poller.stop()  # what the shutdown does from the event loop's thread
        raise AssertionError("a client closed underneath the reading")

    monkeypatch.setattr(poller, "_read", read_while_stopping)
    before = poller.last
    with caplog.at_level("DEBUG", logger="logferry.console"):
        assert poller.poll() is before
        assert poller.poll() is before  # stopped: no new reading at all
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert "cut short by the console stopping" in caplog.text

    running = ClusterPoller(from_zk(["live=zk:2181/x"]).clusters[0])
    monkeypatch.setattr(running, "_connect", lambda: None)
    monkeypatch.setattr(running, "_read", lambda: (_ for _ in ()).throw(AssertionError("a real bug")))
    with pytest.raises(AssertionError, match="a real bug"):
        running.poll()
