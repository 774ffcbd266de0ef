"""The console's pipeline and agents views in a real browser (Debian's Chromium via
Playwright) against real brokers: a real agent's heartbeats list it with its file and lag,
and mark it stale once killed; the pipeline joins the live cluster's agent counts with
the analysis cluster's mirror counts, tier against tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.client import AuditRecord, Producer
from tests.agent import conftest as agent_fixtures
from tests.agent.conftest import wait_until
from tests.console.browser import ConsoleProcess, open_browser

agent_process = agent_fixtures.agent_process  # the fixture, shared with tests/agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wait_text(page, selector: str, expected: str, timeout_ms: int = 15_000) -> None:
    """Wait until ``selector``'s text is ``expected``: the page shows each new reading
    (a heartbeat, an audit record becoming visible one fsync after its ack) when it
    comes, so a first render may still hold an earlier one."""
    page.wait_for_function(
        "([sel, want]) => document.querySelector(sel)?.textContent === want",
        arg=[selector, expected],
        timeout=timeout_ms,
    )
    assert page.text_content(selector) == expected


@pytest.mark.timeout(180)
def test_agents_and_pipeline_views(broker_cluster, zookeeper, agent_process, tmp_path: Path):
    live = broker_cluster(1, zk=zookeeper.new_chroot())
    analysis = broker_cluster(1, zk=zookeeper.new_chroot())
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(b"".join(b"line %d\n" % i for i in range(100)))
    agent = agent_process(
        {
            "host": "web-7",
            "state_dir": str(tmp_path / "state"),
            "poll_interval_s": 0.05,
            "cluster": {"zk": live.zk_connect},
            "producer": {"linger_ms": 5},
            "audit": {"window_s": 3600, "heartbeat_s": 1},
            "sources": [{"name": "app", "pattern": f"{logs}/*.log", "topic": "app"}],
        }
    ).start()
    wait_until(lambda: agent.counter("messages_acked") >= 100, 30, "agent acks")
    with Producer(zk=live.zk_connect) as producer:  # what another agent counted
        producer.send("_audit", [AuditRecord("web", 60_000, 120_000, 50, 40, "web-1").encode()])
        producer.flush(30)
    with Producer(zk=analysis.zk_connect) as producer:  # the agents' copy (twice), the mirror's
        producer.send(
            "_audit",
            [
                AuditRecord("web", 60_000, 120_000, 50, 40, "web-1").encode(),
                AuditRecord("web", 60_000, 120_000, 50, 40, "web-1").encode(),
            ],
        )
        producer.send("_audit.mirror", [AuditRecord("web", 60_000, 120_000, 60, 60, "m-1", "mirror").encode()])
        producer.flush(30)
    console = ConsoleProcess(f"live={live.zk_connect}", f"analysis={analysis.zk_connect}")
    try:
        for page, errors in open_browser():
            page.goto(console.url + "?view=audit")
            agent_row = '#agents [data-agent="web-7"]'
            page.wait_for_selector(agent_row)
            wait_text(page, f"{agent_row} [data-agent-state]", "running")
            page.wait_for_selector(f'{agent_row} [data-agent-file="{logs}/a.log"]')
            wait_text(page, f"{agent_row} [data-agent-lag]", "0")

            row = '#pipeline [data-pipeline-topic="web"][data-window="60000"]'
            page.wait_for_selector(row)
            wait_text(page, f'{row} [data-tier="agent"]', "40")  # the live cluster's
            wait_text(page, f'{row} [data-tier-pct="agent"]', "80.00%")
            wait_text(page, f'{row} [data-tier="mirror"]', "60")
            wait_text(page, f'{row} [data-tier-pct="mirror"]', "150.00%")

            agent.kill()  # no heartbeat for 3 intervals: stale
            page.wait_for_function(
                """() => document.querySelector('#agents [data-agent="web-7"] [data-agent-state]')
                   ?.textContent === "STALE" """,
                timeout=15_000,
            )
            assert errors == [], errors
    finally:
        assert console.stop() == 0, "".join(console.stderr)
