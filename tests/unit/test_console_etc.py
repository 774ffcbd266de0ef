"""etc/'s console config, Prometheus alert rules and Grafana dashboard: each loads, promtool
accepts the rules, and every metric they name is one a logferry process exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.metrics import COUNTERS as AGENT_COUNTERS
from agent.metrics import GAUGES as AGENT_GAUGES
from console.config import load_config
from console.metrics import GAUGES as CONSOLE_GAUGES

ROOT = Path(__file__).resolve().parents[2]
ETC = ROOT / "etc"
RULES = ETC / "prometheus" / "logferry-alerts.yml"
DASHBOARD = ETC / "grafana" / "logferry-dashboard.json"
CONSOLE = ETC / "console.toml"


def exported() -> set[str]:
    """Every metric name the broker, agent, mirror and console declare (samples included)."""
    names = {f"logferry_agent_{n}_total" for n in AGENT_COUNTERS} | {f"logferry_agent_{n}" for n in AGENT_GAUGES}
    names |= {f"logferry_console_{n}" for n in CONSOLE_GAUGES}
    for prefix, source in (("logferry_", "broker/server/broker_metrics.py"), ("logferry_mirror_", "mirror/status.py")):
        text = (ROOT / source).read_text()
        names |= {prefix + n for n in re.findall(r'"([a-z_]+)"', text)}
    return names


def used(text: str) -> set[str]:
    return {n for n in re.findall(r"\blogferry_[a-z_]+\b", text) if not n.endswith("_")} - {"logferry_overview"}


def test_console_example_config_loads():
    config = load_config(CONSOLE)
    assert [c.name for c in config.clusters] == ["live", "analysis"]
    assert config.host == "127.0.0.1"


@pytest.mark.integration  # runs promtool
def test_alert_rules_pass_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is missing: Debian's `prometheus` package provides it "
            "(scripts/install-system-deps.sh installs it)"
        )
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_rules_and_dashboard_name_only_exported_metrics():
    names = exported()
    rules = {n for n in used(RULES.read_text()) if not n.startswith("logferry_alerts")}
    dashboard = used(DASHBOARD.read_text())
    assert rules and dashboard
    assert rules <= names, sorted(rules - names)
    assert dashboard <= names, sorted(dashboard - names)


def test_dashboard_is_grafana_json():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["panels"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
