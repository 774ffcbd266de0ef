"""The broker's TOML configuration, validated at start with errors that name the key.

Keys follow the paper's and Kafka's names with underscores (``segment.bytes`` is
``[log] segment_bytes``) because a dot in a TOML key means a nested table. The full
reference with defaults is ``docs/configuration.md``; ``etc/live/broker-1.toml`` is a
working example.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from broker.common.errors import ConfigError
from broker.storage.config import LogConfig


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a broker process needs to start."""

    broker_id: int
    zk_connect: str
    log_dirs: tuple[Path, ...]
    host: str = "127.0.0.1"
    port: int = 9092
    datacenter: str = "default"
    max_request_bytes: int = 100 * 1024 * 1024
    num_partitions: int = 4
    auto_create_topics: bool = True
    metrics_port: int = 0
    zk_session_timeout_s: float = 10.0
    retention_check_ms: int = 60_000
    shutdown_timeout_s: float = 10.0
    rack: str = ""
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 4 * 1024 * 1024
    acks_all_timeout_ms: int = 20_000
    unclean_leader_election: bool = False
    leader_rebalance_interval_s: float = 300.0
    log: LogConfig = field(default_factory=LogConfig)


# key -> (type check, description used in error messages, converter)
_Spec = tuple[Callable[[Any], bool], str]

_POSITIVE_INT: _Spec = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                        "a positive integer")
_NONNEG_INT: _Spec = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                      "an integer >= 0")
_INT_OR_UNLIMITED: _Spec = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= -1,
                            "an integer >= 0, or -1 for unlimited")
_PORT: _Spec = (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535,
                "a port number 0-65535")
_STR: _Spec = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_BOOL: _Spec = (lambda v: isinstance(v, bool), "true or false")
_NUMBER: _Spec = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                  "a positive number")
_PATHS: _Spec = (lambda v: isinstance(v, list) and v and all(isinstance(p, str) and p for p in v),
                 "a non-empty list of directory paths")

_BROKER_KEYS: dict[str, _Spec] = {
    "id": _NONNEG_INT,
    "host": _STR,
    "port": _PORT,
    "datacenter": _STR,
    "log_dirs": _PATHS,
    "zk_connect": _STR,
    "zk_session_timeout_s": _NUMBER,
    "max_request_bytes": _POSITIVE_INT,
    "num_partitions": _POSITIVE_INT,
    "auto_create_topics": _BOOL,
    "metrics_port": _PORT,
    "retention_check_ms": _POSITIVE_INT,
    "shutdown_timeout_s": _NUMBER,
    "rack": _STR,
    "default_replication_factor": _POSITIVE_INT,
    "min_insync_replicas": _POSITIVE_INT,
    "replica_lag_time_max_ms": _POSITIVE_INT,
    "replica_fetch_wait_max_ms": _POSITIVE_INT,
    "replica_fetch_max_bytes": _POSITIVE_INT,
    "acks_all_timeout_ms": _POSITIVE_INT,
    "unclean_leader_election": _BOOL,
    "leader_rebalance_interval_s": (lambda v: isinstance(v, (int, float))
                                    and not isinstance(v, bool) and v >= 0,
                                    "a number of seconds >= 0 (0 turns it off)"),
}
_REQUIRED_BROKER_KEYS = ("id", "log_dirs", "zk_connect")

_LOG_KEYS: dict[str, _Spec] = {
    "segment_bytes": _POSITIVE_INT,
    "segment_ms": _POSITIVE_INT,
    "flush_messages": _POSITIVE_INT,
    "flush_ms": _POSITIVE_INT,
    "retention_hours": _NUMBER,
    "retention_ms": _POSITIVE_INT,
    "retention_bytes": _INT_OR_UNLIMITED,
}


def load_broker_config(path: str | Path) -> BrokerConfig:
    """Read and validate a broker config file; raise ConfigError naming the bad key."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return broker_config_from_dict(data, source=str(path))


def broker_config_from_dict(
    data: dict[str, Any], source: str = "config"
) -> BrokerConfig:
    """Validate a parsed config (a dict shaped like the TOML file)."""
    unknown = set(data) - {"broker", "log"}
    if unknown:
        raise ConfigError(f"{source}: unknown section [{sorted(unknown)[0]}]; "
                          "expected [broker] and [log]")
    broker = _section(data, "broker", _BROKER_KEYS, source)
    log = _section(data, "log", _LOG_KEYS, source)
    for key in _REQUIRED_BROKER_KEYS:
        if key not in broker:
            raise ConfigError(f"{source}: broker.{key} is required")
    if "retention_hours" in log and "retention_ms" in log:
        raise ConfigError(f"{source}: set log.retention_hours or log.retention_ms, not both")
    log_kwargs = {k: v for k, v in log.items() if k != "retention_hours"}
    if "retention_hours" in log:
        log_kwargs["retention_ms"] = int(log["retention_hours"] * 3600 * 1000)
    # Relative log dirs are relative to the working directory (documented in etc/).
    dirs = tuple(Path(p).expanduser().absolute() for p in broker.pop("log_dirs"))
    broker_id = broker.pop("id")
    zk_connect = broker.pop("zk_connect")
    _check_zk_connect(zk_connect, source)
    return BrokerConfig(broker_id=broker_id, zk_connect=zk_connect, log_dirs=dirs,
                        log=LogConfig(**log_kwargs), **broker)


def _section(data: dict[str, Any], name: str, keys: dict[str, _Spec], source: str) -> dict:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: {name} must be a table ([{name}])")
    out = {}
    for key, value in section.items():
        spec = keys.get(key)
        if spec is None:
            known = ", ".join(sorted(keys))
            raise ConfigError(f"{source}: unknown key {name}.{key} (known keys: {known})")
        check, expected = spec
        if not check(value):
            raise ConfigError(f"{source}: {name}.{key} must be {expected}, got {value!r}")
        out[key] = value
    return out


def _check_zk_connect(value: str, source: str) -> None:
    hosts, _, chroot = value.partition("/")
    if not hosts or any(":" not in h for h in hosts.split(",")):
        raise ConfigError(f"{source}: broker.zk_connect must look like "
                          f"'host:port[,host:port]/chroot', got {value!r}")
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise ConfigError(f"{source}: broker.zk_connect has a malformed chroot {'/' + chroot!r}")
