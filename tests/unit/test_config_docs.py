"""docs/configuration.md lists every key the config loaders accept (no drift)."""

from pathlib import Path

from broker.server import config

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()


def test_every_broker_key_is_documented():
    missing = [f"broker.{k}" for k in config._BROKER_KEYS if f"| `{k}` |" not in DOC]
    missing += [f"log.{k}" for k in config._LOG_KEYS if f"| `{k}` |" not in DOC]
    assert not missing, f"undocumented keys: {missing}"


def test_documented_broker_defaults_match_the_code():
    defaults = config.BrokerConfig(broker_id=0, zk_connect="h:1/c", log_dirs=())
    for key in ("host", "port", "datacenter", "max_request_bytes", "num_partitions",
                "metrics_port", "retention_check_ms"):
        value = getattr(defaults, key)
        shown = f'"{value}"' if isinstance(value, str) else str(value)
        assert f"| `{key}` | `{shown}` |" in DOC, key
    log = defaults.log
    for key in ("segment_bytes", "segment_ms", "flush_messages", "flush_ms", "retention_bytes"):
        assert f"| `{key}` | `{getattr(log, key)}` |" in DOC, key
