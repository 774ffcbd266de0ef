"""The console in a real browser (Debian's Chromium via Playwright) against real brokers
and a real ZooKeeper: it loads without errors, shows what ``logferry topic describe`` and
``logferry group describe`` print, follows production, and notices a killed broker."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from broker.client import Admin, AgentHeartbeat, AuditRecord, GroupConsumer, Producer, file_entries
from tests.console.browser import ConsoleProcess, open_browser
from tests.support import waiting
from tests.support.cli import logferry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "zk_session_timeout_s": 2.0,
    "replica_lag_time_max_ms": 1000,
    "leader_rebalance_interval_s": 0,
    "default_replication_factor": 2,
    "min_insync_replicas": 1,
}


def cli(*argv: str) -> str:
    done = logferry(*argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def topic_describe(zk: str, topic: str) -> dict[int, tuple[int, str, str]]:
    """partition -> (leader, replicas, isr) as ``logferry topic describe`` prints them."""
    rows = {}
    for line in cli("topic", "describe", topic, "--zk", zk).splitlines()[2:]:
        fields = line.split()
        rows[int(fields[1])] = (int(fields[2]), fields[4], fields[5])
    return rows


def page_cells(page, selector: str, fields: list[str]) -> dict[int, list[str]]:
    return page.eval_on_selector_all(
        selector,
        """(rows, fields) => Object.fromEntries(rows.map(r =>
        [r.dataset.partition, fields.map(f => r.querySelector(`[data-field="${f}"]`).textContent)]))""",
        fields,
    )


def number(text: str) -> int:
    return int(re.sub(r"[^0-9]", "", text))


@pytest.mark.timeout(240)
def test_console_in_a_browser(broker_cluster, tmp_path):
    cluster = broker_cluster(2, broker=SETTINGS)
    zk = cluster.zk_connect
    with Admin(zk=zk) as admin:
        admin.create_topic("web", 4, 2)
    with Producer(zk=zk, linger_ms=2) as producer:
        for p in range(4):
            producer.send("web", [b"GET /index.html %d" % i for i in range(200)], partition=p)
        producer.flush(30)
    consumer = GroupConsumer("dash", ["web"], zk=zk, auto_commit_ms=0)
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 400 and time.monotonic() < deadline:
        got += consumer.poll(0.2, max_messages=400 - len(got))
    consumer.poll(0)
    consumer.commit()

    console = ConsoleProcess(f"live={zk}", interval=0.5)
    try:
        for page, errors in open_browser():
            page.goto(console.url)
            page.wait_for_selector('[data-summary="partitions"]', timeout=15_000)
            assert page.text_content('[data-cluster="live"] [data-summary="partitions"]') == "4"
            assert page.text_content('[data-summary="brokers_up"]') == "2/2"

            # Topics: the same leader, replicas and ISR as `logferry topic describe`.
            page.click('#tabs button[data-view="topics"]')
            page.wait_for_selector('[data-partitions="web"] tr[data-partition="3"]')
            described = topic_describe(zk, "web")
            shown = page_cells(page, '[data-partitions="web"] tr[data-topic]', ["leader", "replicas", "isr"])
            assert {int(p): (int(v[0]), v[1], v[2]) for p, v in shown.items()} == described

            # Consumer groups: committed offset, log end and lag as `group describe` prints.
            page.click('#tabs button[data-view="groups"]')
            page.wait_for_selector('tr[data-group="dash"][data-partition="3"]')
            info = json.loads(cli("group", "describe", "dash", "--zk", zk, "--json"))
            want = {r["partition"]: (r["committed"], r["log_end"], r["lag_bytes"]) for r in info["partitions"]}

            def group_matches(page=page, want=want):
                cells = page_cells(page, 'tr[data-group="dash"]', ["committed", "log_end", "lag_bytes"])
                return {int(p): tuple(number(c) for c in v) for p, v in cells.items()} == want

            waiting.wait_until(group_matches, 5, "the page's group table equals group describe")
            assert page.text_content('[data-group-card="dash"] [data-field="group-status"]') in (
                "OK",
                "WARN",
                "STOP",
                "STALL",
                "REWIND",
            )
            lag_before = number(page.text_content('[data-group-card="dash"] [data-field="group-lag"]'))

            # Producing moves the topic's rate and the group's lag.
            page.click('#tabs button[data-view="topics"]')
            with Producer(zk=zk, linger_ms=2) as producer:
                for _ in range(6):
                    for p in range(4):
                        producer.send("web", [b"POST /api %d" % i for i in range(300)], partition=p)
                    producer.flush(30)
                    time.sleep(0.3)
            waiting.wait_until(
                lambda page=page: any(
                    number(v[0]) > 0
                    for v in page_cells(page, '[data-partitions="web"] tr[data-topic]', ["bytes_in_s"]).values()
                ),
                5,
                "a rate above 0 on the page",
            )
            page.click('#tabs button[data-view="groups"]')
            waiting.wait_until(
                lambda page=page, lag_before=lag_before: (
                    number(page.text_content('[data-group-card="dash"] [data-field="group-lag"]')) > lag_before
                ),
                5,
                "the group's lag grows",
            )
            # and its lag in time: since the first message it has not consumed arrived
            lag_time = page.text_content('[data-group-card="dash"] [data-field="group-lag-time"]') or ""
            assert lag_time.endswith(" s") and lag_time != "0.0 s", lag_time
            # and its short history: a reading per poll, the newest first in the table
            history = '[data-lag-history="dash"]'
            assert int(page.get_attribute(history, "data-points") or 0) >= 2
            newest = page.eval_on_selector_all(f"{history} table tr", "rows => rows[1].innerText.split('\\t')")
            assert number(newest[1]) > 0 and newest[0].endswith(" UTC"), newest

            # Killing a broker: its partitions turn under-replicated within 5 s.
            page.click('#tabs button[data-view="clusters"]')
            victim = cluster.brokers[1]
            killed_at = time.monotonic()
            victim.kill()
            waiting.wait_until(
                lambda page=page: page.text_content('[data-summary="under_replicated"]') == "4",
                5,
                "4 under-replicated partitions on the page",
                interval=0.05,
            )
            seen_after = time.monotonic() - killed_at
            assert page.text_content('[data-summary="brokers_up"]') == "1/2"
            page.click('#tabs button[data-view="topics"]')
            page.wait_for_selector('[data-partitions="web"] tr.urp, [data-partitions="web"] tr.offline')
            page.click('#tabs button[data-view="clusters"]')
            page.wait_for_timeout(300)
            # LOGFERRY_CONSOLE_SCREENSHOT=FILE keeps the picture (docs/images/console.png is the demo's).
            shot = Path(os.environ.get("LOGFERRY_CONSOLE_SCREENSHOT") or tmp_path / "console.png")
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 1000
            assert errors == [], errors
            print(f"under-replicated on the page {seen_after:.1f}s after the kill")
    finally:
        consumer.close()
        assert console.stop() == 0, "".join(console.stderr)


@pytest.mark.timeout(120)
def test_messages_view_browses_and_tails_and_the_audit_view_sums_the_records(broker_cluster):
    """Also: a cluster that is not there is shown as unreachable, beside one that is, and
    a topic that is not there is named as missing."""
    cluster = broker_cluster(1)
    zk = cluster.zk_connect
    audit = [
        AuditRecord("logs", 60_000, 120_000, 20, 20, "web-1"),
        AuditRecord("logs", 60_000, 120_000, 10, 9, "web-2"),
        AuditRecord("logs", 60_000, 120_000, 0, 29, "", "mirror"),
        AuditRecord("logs", 120_000, 180_000, 0, 12, "", "mirror"),  # the agents' count never came
    ]
    with Producer(zk=zk, linger_ms=2) as producer:
        producer.send("logs", [b"line %d" % i for i in range(30)], partition=0)
        producer.send("_audit", [r.encode() for r in audit], partition=0)
        # one host's log rotated twice: three files of one path, told apart on the page
        rotated = [
            {"path": "/var/log/app.log", "where": "/var/log/app.log", "inode": 30, "lag": 5},
            {"path": "/var/log/app.log", "where": "/var/log/app.log.1", "inode": 20, "lag": 0, "rotated": True},
            {"path": "/var/log/app.log", "where": None, "inode": 10, "lag": 0, "rotated": True, "deleted": True},
        ]
        beat = AgentHeartbeat("web-1", "1", 7, 0, int(time.time() * 1000), 10.0, "running", 5, file_entries(rotated))
        producer.send("_agents", beat.encode(), key=b"web-1", partition=0)
        producer.flush(30)
    missing = zk.rsplit("/", 1)[0] + "/no-cluster-here"  # a chroot nobody registered
    console = ConsoleProcess(f"live={zk}", f"gone={missing}")
    try:
        for page, errors in open_browser():
            page.goto(console.url)
            page.wait_for_selector('[data-cluster="gone"] .bad')
            assert "no logferry cluster" in page.text_content('[data-cluster="gone"]')
            assert page.text_content('[data-cluster="live"] [data-summary="brokers_up"]') == "1/1"
            page.goto(console.url + "?view=messages")
            page.wait_for_function("document.body.dataset.seq > 0")
            page.fill('#browse input[name="topic"]', "logs")
            page.fill('#browse input[name="limit"]', "10")
            page.click('#browse button[type="submit"]')
            page.wait_for_selector("#message-rows tr:nth-child(11)")
            assert "line 0" in page.text_content("#message-rows tr:nth-child(2)")
            # offsets as Kafka clients see them: one per message
            offsets = page.eval_on_selector_all(
                "#message-rows [data-field=offset]", "cells => cells.map(c => c.textContent)"
            )
            assert offsets == [str(i) for i in range(10)], offsets
            # the next page goes on inside the same batch of 30: nothing skipped
            page.click("#next-page")
            page.wait_for_function(
                "() => document.querySelector('#message-rows tr:nth-child(2)')?.textContent.includes('line 10')"
            )
            assert [
                f"line {i}" in page.text_content(f"#message-rows tr:nth-child({i - 8})") for i in range(10, 20)
            ] == [True] * 10
            # the topic box offers the cluster's topics
            topics = page.evaluate("[...document.querySelectorAll('#topic-names option')].map(o => o.value)")
            assert "logs" in topics and "_audit" in topics, topics
            # from a Kafka offset, searching the text: bounded by what the page reads, said so
            page.fill('#browse input[name="offset"]', "12")
            page.fill('#browse input[name="q"]', "LINE 2")
            page.click('#browse button[type="submit"]')
            page.wait_for_selector("[data-searched]")
            found = page.eval_on_selector_all(
                "#message-rows tr[data-message-offset]", "rows => rows.map(r => r.dataset.messageOffset)"
            )
            assert found == [str(i) for i in range(20, 30)], found
            assert "searched 18 message(s) from offset 12" in page.text_content("[data-searched]")
            page.fill('#browse input[name="offset"]', "")
            page.fill('#browse input[name="q"]', "")
            page.click("#tail")
            page.wait_for_timeout(800)
            with Producer(zk=zk, linger_ms=2) as producer:
                producer.send("logs", [b"tailed %d" % i for i in range(3)], partition=0)
                producer.flush(30)
            page.wait_for_selector("text=tailed 2", timeout=5_000)
            page.click("#tail")  # stop tailing
            page.fill('#browse input[name="topic"]', "no-such-topic")
            page.click('#browse button[type="submit"]')
            page.wait_for_selector("#messages .bad")
            assert "topic 'no-such-topic' does not exist in cluster 'live'" in page.text_content("#messages .bad")
            # the browser logs the 404 itself as a console error: that one, and only it
            assert [e for e in errors if "404 (Not Found)" in e] == [errors.pop()], errors

            page.click('#tabs button[data-view="audit"]')
            row = '[data-audit-topic="logs"][data-window="60000"]'
            page.wait_for_selector(row)
            assert page.text_content(f'{row} [data-stage="agent"]') == "29 / 30"
            assert page.text_content(f'{row} [data-stage-pct="agent"]') == "96.67%"
            assert page.text_content(f'{row} [data-stage-pct="mirror"]') == "100.00%"
            # a window the agents published nothing for: their tier missing (amber: a later
            # tier counted it), the mirror judged against nothing, not 100%
            gap = '[data-pipeline-topic="logs"][data-window="120000"]'
            assert page.text_content(f'{gap} [data-tier="agent"]') == "missing"
            assert "WARN" in page.get_attribute(f'{gap} [data-tier="agent"]', "class")
            assert page.text_content(f'{gap} [data-tier-pct="mirror"]') == "-"
            files = page.eval_on_selector_all(
                '[data-agent="web-1"] [data-agent-file]', "fs => fs.map(f => f.textContent.replace(/\\s+/g, ' '))"
            )
            assert files == [
                "/var/log/app.log inode 30, lag 5",
                "/var/log/app.log now unknown (rotated, deleted) inode 10, lag 0",
                "/var/log/app.log now /var/log/app.log.1 (rotated) inode 20, lag 0",
            ], files
            assert errors == [], errors
    finally:
        assert console.stop() == 0, "".join(console.stderr)
