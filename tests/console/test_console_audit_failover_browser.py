"""Audit by event-time windows (issue 39), in a real browser over a real pipeline: an
agent tails a log written at a steady pace into a live cluster of two brokers, a mirror
copies it into an analysis cluster, and the leader of the topic's partition is killed
(kill -9) under load. Once the windows settled, every one of them shows the agent and the
mirror at 100%, and the windows add up to the lines written. Before, the mirror counted a
batch whole in its first message's window: batches that straddle a boundary (the agent's
producer lingers across it) showed one window over 100% and the next under, for ever."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from broker.client import Admin
from tests.agent import conftest as agent_fixtures
from tests.agent.conftest import NumberedLog
from tests.console.browser import ConsoleProcess, open_browser
from tests.mirror import conftest as mirror_fixtures
from tests.mirror.conftest import topic_messages
from tests.support import waiting

agent_process = agent_fixtures.agent_process  # the fixtures, shared with tests/agent and tests/mirror
mirrors = mirror_fixtures.mirrors

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SETTINGS = {
    "zk_session_timeout_s": 2.0,
    "replica_lag_time_max_ms": 1000,
    "leader_rebalance_interval_s": 0,
    "min_insync_replicas": 1,
    "default_replication_factor": 2,  # the audit topics too: they outlive the killed broker
}
LOAD_S = 5.0
"""Lines are written for this long, 5 every 20 ms; the leader dies a third of the way in."""
SETTLE_S = 2.0


class PacedWriter(threading.Thread):
    """Appends 5 numbered lines every 20 ms for :data:`LOAD_S`."""

    def __init__(self, log: NumberedLog):
        super().__init__(daemon=True)
        self.log = log

    def run(self) -> None:
        end = time.monotonic() + LOAD_S
        while time.monotonic() < end:
            self.log.write(5)
            time.sleep(0.02)


def pipeline_rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        '#pipeline tr[data-pipeline-topic="app"]',
        """rows => rows.map(r => ({
            window: r.dataset.window, state: r.dataset.windowState,
            agent: r.querySelector('[data-tier="agent"]')?.textContent,
            agent_pct: r.querySelector('[data-tier-pct="agent"]')?.textContent,
            mirror: r.querySelector('[data-tier="mirror"]')?.textContent,
            mirror_pct: r.querySelector('[data-tier-pct="mirror"]')?.textContent,
            mirror_class: r.querySelector('[data-tier-pct="mirror"]')?.className}))""",
    )


def count(text: str | None) -> int:
    """A tier's count as the page shows it; 0 for "-" (nothing to judge) and "missing"
    (the tier's record for the window has not arrived: the wait goes on)."""
    digits = (text or "").replace(",", "")
    return int(digits) if digits.isdigit() else 0


@pytest.mark.timeout(180)
def test_no_settled_window_outside_100_after_a_leader_failover(
    broker_cluster, zookeeper, agent_process, mirrors, tmp_path: Path
):
    live = broker_cluster(2, broker=SETTINGS, zk=zookeeper.new_chroot())
    analysis = broker_cluster(1, zk=zookeeper.new_chroot())
    with Admin(zk=live.zk_connect) as admin:
        admin.create_topic("app", 1, 2)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = NumberedLog(logs / "a.log")
    log.write(1)
    agent = agent_process(
        {
            "host": "web-1",
            "state_dir": str(tmp_path / "state"),
            "poll_interval_s": 0.05,
            "cluster": {"zk": live.zk_connect},
            "producer": {"linger_ms": 200},  # batches hold lines read either side of a boundary
            "audit": {"window_s": 1, "heartbeat_s": 1},
            "sources": [{"name": "app", "pattern": f"{logs}/*.log", "topic": "app"}],
        }
    ).start()
    mirror = mirrors("m1", live, analysis, group="mirror", audit_window_s=1, mode="preserve", topics=["app"])
    console = ConsoleProcess(
        f"live={live.zk_connect}", f"analysis={analysis.zk_connect}", extra=["--audit-settle", str(SETTLE_S)]
    )
    try:
        for page, errors in open_browser():
            page.goto(console.url + "?view=audit")
            writer = PacedWriter(log)
            writer.start()
            time.sleep(LOAD_S / 3)
            with Admin(zk=live.zk_connect) as admin:
                leader = admin.describe_cluster().topics["app"][0].leader
            victim = next(b for b in live.brokers if b.id == leader)
            victim.kill()  # the partition's leader, under load
            writer.join(LOAD_S + 10)
            total = log.written
            waiting.wait_until(
                lambda total=total: agent.counter("messages_acked") >= total, 60, f"the agent acked {total}"
            )
            waiting.wait_until(
                lambda total=total: topic_messages(analysis.zk_connect, "app") >= total,
                60,
                f"the mirror copied {total}",
            )

            def summed(page=page, total=total) -> bool:
                rows = pipeline_rows(page)
                return (
                    len(rows) >= int(LOAD_S) - 1
                    and sum(count(r["agent"]) for r in rows) == total
                    and sum(count(r["mirror"]) for r in rows) == total
                )

            def settled(page=page) -> bool:
                return all(r["state"] == "settled" for r in pipeline_rows(page))

            for done, what in ((summed, "both tiers summing to the lines written"), (settled, "every window settled")):
                try:
                    waiting.wait_until(done, 30, what)
                except AssertionError as exc:
                    shows = pipeline_rows(page)
                    raise AssertionError(f"{exc}: {total} lines written, the page shows {shows}") from None
                # every message counted by both tiers: each window's figures are final, and
                # each is 100% (the page of 5f05dca, which has no settling, fails here:
                # the mirror's per-batch windows over and under 100%, docs/testing.md)
                rows = pipeline_rows(page)
                outside = [r for r in rows if (r["agent_pct"], r["mirror_pct"]) != ("100.00%", "100.00%")]
                assert outside == [], outside
            assert all(r["mirror_class"].split()[-1] == "OK" for r in rows), rows
            # the filter: by topic, and settled windows outside 100% only (none here)
            page.fill('#audit-filter input[name="topic"]', "no-such")
            page.wait_for_selector('#pipeline tr[data-pipeline-topic="app"]', state="detached")
            page.fill('#audit-filter input[name="topic"]', "ap")
            page.wait_for_selector('#pipeline tr[data-pipeline-topic="app"]')
            page.check('#audit-filter input[name="problems"]')
            page.wait_for_selector('#pipeline tr[data-pipeline-topic="app"]', state="detached")
            assert "no window matches the filter" in (page.text_content("#pipeline") or "")
            assert errors == [], errors
            print(f"{len(rows)} settled windows at 100%, {total} lines; killed broker {leader}, the leader")
    finally:
        assert console.stop() == 0, "".join(console.stderr)
        assert mirror.terminate() == 0
