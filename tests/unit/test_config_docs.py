"""The docs list every key the config loaders accept (no drift).

The broker's keys are in docs/configuration.md with their defaults; the agent's, the
mirror's and the loader's in their own pages (docs/configuration.md points to them).
"""

import re
from pathlib import Path

import pytest

from agent import config as agent_config
from broker.server import config
from hadoop_loader import config as loader_config
from mirror import config as mirror_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = (DOCS / "configuration.md").read_text()


def test_every_broker_key_is_documented():
    missing = [f"{section}.{k}" for section, keys in config.SECTIONS.items() for k in keys if f"| `{k}` |" not in DOC]
    assert not missing, f"undocumented keys: {missing}"


def test_documented_broker_defaults_match_the_code():
    defaults = config.BrokerConfig(broker_id=0, zk_connect="h:1/c", log_dirs=())
    for key in (
        "host",
        "port",
        "datacenter",
        "max_request_bytes",
        "num_partitions",
        "metrics_port",
        "retention_check_ms",
    ):
        value = getattr(defaults, key)
        shown = f'"{value}"' if isinstance(value, str) else str(value)
        assert f"| `{key}` | `{shown}` |" in DOC, key
    log = defaults.log
    for key in ("segment_bytes", "segment_ms", "flush_messages", "flush_ms", "retention_bytes"):
        assert f"| `{key}` | `{getattr(log, key)}` |" in DOC, key
    assert f'| `visibility` | `"{log.visibility}"` |' in DOC


def _agent_tables():
    tables = ("cluster", "producer", "audit", "metrics", "sources")
    top = {k: f for k, f in agent_config.TOP.items() if k not in tables}
    return {
        "": top,
        "cluster": agent_config.CLUSTER,
        "producer": agent_config.PRODUCER,
        "audit": agent_config.AUDIT,
        "metrics": agent_config.METRICS,
        "sources": agent_config.SOURCE,
        "sources.multiline": agent_config.MULTILINE,
        "sources.parse": agent_config.PARSE,
    }


@pytest.mark.parametrize(
    "page, tables",
    [
        ("agent.md", _agent_tables()),
        ("mirror.md", mirror_config.SECTIONS),
        ("loader.md", loader_config.SECTIONS),
    ],
    ids=["agent", "mirror", "loader"],
)
def test_every_component_key_is_documented(page, tables):
    rows = "\n".join(line for line in (DOCS / page).read_text().splitlines() if line.startswith("| "))
    missing = [
        f"{table}.{key}" if table else key
        for table, keys in tables.items()
        for key in keys
        if not re.search(rf"[`.\s\]]{re.escape(key)}[`\s\]]", rows)
    ]
    assert not missing, f"keys missing from docs/{page}: {missing}"


def test_configuration_page_points_to_every_component():
    for page in ("agent.md", "mirror.md", "loader.md"):
        assert f"({page}" in DOC, page
