"""The agent's TOML configuration, validated at start with errors that name the key.

Every key, its type and default is listed in docs/agent.md; etc/agent.toml is a
working example. Validation happens once, here: a wrong type, an unknown key (with a
suggestion when it looks like a typo), a regex that does not compile or a topic name
the broker would refuse all raise :class:`~agent.errors.ConfigError` naming the key,
e.g. ``sources[1].pattern: must be an absolute glob pattern``.
"""

from __future__ import annotations

import difflib
import re
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.errors import ConfigError

TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
MiB = 1024 * 1024


@dataclass(frozen=True)
class MultilineConfig:
    """Which lines continue the message before them (see agent.multiline)."""

    continuation: re.Pattern[bytes] | None
    start: re.Pattern[bytes] | None
    max_bytes: int = MiB
    timeout_s: float = 2.0


@dataclass(frozen=True)
class SourceConfig:
    """A set of files (glob patterns) published to one topic."""

    name: str
    patterns: tuple[str, ...]
    topic: str
    exclude: tuple[str, ...] = ()
    key: bytes | None = None
    """Message key; None means the host name (set by load_config)."""
    start_at: str = "beginning"
    max_line_bytes: int = MiB
    partial_line_timeout_s: float = 5.0
    idle_close_s: float = 60.0
    time_pattern: re.Pattern[bytes] | None = None
    time_format: str | None = None
    time_zone: str = "local"
    multiline: MultilineConfig | None = None


@dataclass(frozen=True)
class ProducerConfig:
    """Options passed to ``broker.client.Producer`` (see docs/client.md)."""

    acks: int | str = 1
    """1: the leader appended; "all": every in-sync replica has it (replicated topics)."""
    linger_ms: float = 20
    batch_bytes: int = MiB
    batch_messages: int = 10_000
    compression: str = "none"
    delivery_timeout_s: float = 60.0
    request_timeout_s: float = 30.0
    retry_backoff_ms: float = 100


@dataclass(frozen=True)
class AuditConfig:
    """Where and how often the agent publishes its audit counts."""

    enabled: bool = True
    topic: str = "_audit"
    window_s: float = 60.0


@dataclass(frozen=True)
class AgentConfig:
    """Everything an agent process needs to start."""

    sources: tuple[SourceConfig, ...]
    state_dir: Path
    zk: str | None = None
    brokers: tuple[str, ...] | None = None
    host: str = field(default_factory=socket.gethostname)
    max_inflight_bytes: int = 32 * MiB
    max_open_files: int = 256
    read_chunk_bytes: int = MiB
    poll_interval_s: float = 0.25
    scan_interval_s: float = 10.0
    checkpoint_interval_s: float = 1.0
    rotated_close_s: float = 5.0
    shutdown_timeout_s: float = 30.0
    fingerprint_bytes: int = 1024
    watch: bool = True
    metrics_port: int | None = None
    metrics_bind: str = "127.0.0.1"
    log_level: str = "INFO"
    producer: ProducerConfig = field(default_factory=ProducerConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)

    @property
    def checkpoint_path(self) -> Path:
        """The checkpoint file (identity + acknowledged offset per file)."""
        return self.state_dir / "checkpoint.json"

    @property
    def status_path(self) -> Path:
        """The status file ``logferry agent status`` reads when no metrics port is set."""
        return self.state_dir / "status.json"


# -- validation helpers -------------------------------------------------------------------

Check = Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_KINDS: dict[str, tuple[Check, str]] = {
    "str": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "pos_int": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "pos_num": (lambda v: _is_num(v) and v > 0, "a positive number"),
    "nonneg_num": (lambda v: _is_num(v) and v >= 0, "a number >= 0"),
    "port": (lambda v: _is_int(v) and 0 <= v <= 65535, "a port number 0-65535"),
    "str_list": (lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v),
                 "a list of non-empty strings"),
    "str_or_list": (lambda v: (isinstance(v, str) and v != "") or (
        isinstance(v, list) and v and all(isinstance(s, str) and s for s in v)),
        "a non-empty string or list of strings"),
    "table": (lambda v: isinstance(v, dict), "a table"),
    "acks": (lambda v: (_is_int(v) and v in (0, 1)) or v == "all", '1 or "all"'),
    "table_list": (lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v),
                   "an array of tables ([[sources]])"),
}

_TOP: dict[str, str] = {
    "host": "str", "state_dir": "str", "max_inflight_bytes": "pos_int",
    "max_open_files": "pos_int", "read_chunk_bytes": "pos_int", "poll_interval_s": "pos_num",
    "scan_interval_s": "pos_num", "checkpoint_interval_s": "pos_num",
    "rotated_close_s": "nonneg_num", "shutdown_timeout_s": "pos_num",
    "fingerprint_bytes": "pos_int", "watch": "bool", "log_level": "str",
    "cluster": "table", "producer": "table", "audit": "table", "metrics": "table",
    "sources": "table_list",
}
_CLUSTER: dict[str, str] = {"zk": "str", "brokers": "str_list"}
_PRODUCER: dict[str, str] = {
    "acks": "acks", "linger_ms": "nonneg_num", "batch_bytes": "pos_int",
    "batch_messages": "pos_int", "compression": "str", "delivery_timeout_s": "pos_num",
    "request_timeout_s": "pos_num", "retry_backoff_ms": "nonneg_num",
}
_AUDIT: dict[str, str] = {"enabled": "bool", "topic": "str", "window_s": "pos_num"}
_METRICS: dict[str, str] = {"port": "port", "bind": "str"}
_SOURCE: dict[str, str] = {
    "name": "str", "pattern": "str_or_list", "exclude": "str_or_list", "topic": "str",
    "key": "str", "start_at": "str", "max_line_bytes": "pos_int",
    "partial_line_timeout_s": "pos_num", "idle_close_s": "pos_num", "time_pattern": "str",
    "time_format": "str", "time_zone": "str", "multiline": "table",
}
_MULTILINE: dict[str, str] = {"continuation": "str", "start": "str", "max_bytes": "pos_int",
                              "timeout_s": "pos_num"}


def _checked(table: dict[str, Any], spec: dict[str, str], where: str) -> dict[str, Any]:
    """Reject unknown keys and wrong types; return the table unchanged."""
    for key, value in table.items():
        name = f"{where}.{key}" if where else key
        kind = spec.get(key)
        if kind is None:
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(name, f"unknown key{hint}")
        check, described = _KINDS[kind]
        if not check(value):
            raise ConfigError(name, f"must be {described}, got {value!r}")
    return table


def _as_tuple(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _regex(value: str, key: str) -> re.Pattern[bytes]:
    try:
        return re.compile(value.encode("utf-8"))
    except re.error as exc:
        raise ConfigError(key, f"not a valid regular expression: {exc}") from None


def _topic(value: str, key: str) -> str:
    if not TOPIC_RE.fullmatch(value) or value in (".", ".."):
        raise ConfigError(key, f"{value!r} is not a valid topic name ([A-Za-z0-9._-]{{1,249}})")
    return value


def _multiline(table: dict[str, Any], where: str) -> MultilineConfig:
    _checked(table, _MULTILINE, where)
    if ("continuation" in table) == ("start" in table):
        raise ConfigError(where, "give exactly one of 'continuation' and 'start'")
    return MultilineConfig(
        continuation=_regex(table["continuation"], f"{where}.continuation")
        if "continuation" in table else None,
        start=_regex(table["start"], f"{where}.start") if "start" in table else None,
        max_bytes=table.get("max_bytes", MiB),
        timeout_s=float(table.get("timeout_s", 2.0)),
    )


def _source(table: dict[str, Any], index: int, host: str) -> SourceConfig:
    where = f"sources[{index}]"
    _checked(table, _SOURCE, where)
    for required in ("pattern", "topic"):
        if required not in table:
            raise ConfigError(f"{where}.{required}", "missing (every source needs one)")
    patterns = _as_tuple(table["pattern"])
    for pattern in patterns:
        if not pattern.startswith("/"):
            raise ConfigError(f"{where}.pattern", f"{pattern!r} must be an absolute glob pattern")
        if pattern.endswith("/"):
            raise ConfigError(f"{where}.pattern", f"{pattern!r} names a directory, not files")
    start_at = table.get("start_at", "beginning")
    if start_at not in ("beginning", "end"):
        raise ConfigError(f"{where}.start_at", f"must be 'beginning' or 'end', got {start_at!r}")
    zone = table.get("time_zone", "local")
    if zone not in ("local", "UTC"):
        raise ConfigError(f"{where}.time_zone", f"must be 'local' or 'UTC', got {zone!r}")
    time_pattern = None
    if "time_pattern" in table:
        time_pattern = _regex(table["time_pattern"], f"{where}.time_pattern")
        if "time" not in time_pattern.groupindex:
            raise ConfigError(f"{where}.time_pattern", "needs a named group (?P<time>...)")
        if "time_format" not in table:
            raise ConfigError(f"{where}.time_format", "missing (required with time_pattern)")
    elif "time_format" in table:
        raise ConfigError(f"{where}.time_format", "given without time_pattern")
    max_line = table.get("max_line_bytes", MiB)
    if max_line < 64:
        raise ConfigError(f"{where}.max_line_bytes", "must be at least 64")
    multiline = _multiline(table["multiline"], f"{where}.multiline") if "multiline" in table \
        else None
    return SourceConfig(
        name=table.get("name", patterns[0]),
        patterns=patterns,
        topic=_topic(table["topic"], f"{where}.topic"),
        exclude=_as_tuple(table.get("exclude")),
        key=table.get("key", host).encode("utf-8"),
        start_at=start_at,
        max_line_bytes=max_line,
        partial_line_timeout_s=float(table.get("partial_line_timeout_s", 5.0)),
        idle_close_s=float(table.get("idle_close_s", 60.0)),
        time_pattern=time_pattern,
        time_format=table.get("time_format"),
        time_zone=zone,
        multiline=multiline,
    )


def parse_config(data: dict[str, Any], base_dir: Path | None = None) -> AgentConfig:
    """Validate a parsed TOML document and build the config (relative paths: base_dir)."""
    _checked(data, _TOP, "")
    host = data.get("host") or socket.gethostname()
    cluster = _checked(data.get("cluster", {}), _CLUSTER, "cluster")
    if ("zk" in cluster) == ("brokers" in cluster):
        raise ConfigError("cluster", "give exactly one of 'zk' (connect string with chroot) "
                          "and 'brokers' (list of host:port)")
    for i, address in enumerate(cluster.get("brokers", [])):
        host_part, _, port = address.rpartition(":")
        if not host_part or not port.isdigit():
            raise ConfigError(f"cluster.brokers[{i}]", f"{address!r} is not host:port")
    if "state_dir" not in data:
        raise ConfigError("state_dir", "missing (where the checkpoint file lives)")
    state_dir = Path(data["state_dir"])
    if not state_dir.is_absolute() and base_dir is not None:
        state_dir = base_dir / state_dir
    tables = data.get("sources")
    if not tables:
        raise ConfigError("sources", "missing: add at least one [[sources]] table")
    sources = tuple(_source(t, i, host) for i, t in enumerate(tables))
    names = [s.name for s in sources]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise ConfigError(f"sources[{i}].name", f"{name!r} is used by another source")
    producer = _checked(data.get("producer", {}), _PRODUCER, "producer")
    if producer.get("acks", 1) == 0:
        raise ConfigError("producer.acks", 'must be 1 or "all": the checkpoint advances on '
                          "acks only")
    if producer.get("compression", "none") not in ("none", "gzip"):
        raise ConfigError("producer.compression", "must be 'none' or 'gzip'")
    audit = _checked(data.get("audit", {}), _AUDIT, "audit")
    metrics = _checked(data.get("metrics", {}), _METRICS, "metrics")
    level = data.get("log_level", "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("log_level", "must be DEBUG, INFO, WARNING or ERROR")
    config = AgentConfig(
        sources=sources,
        state_dir=state_dir,
        zk=cluster.get("zk"),
        brokers=tuple(cluster["brokers"]) if "brokers" in cluster else None,
        host=host,
        max_inflight_bytes=data.get("max_inflight_bytes", 32 * MiB),
        max_open_files=data.get("max_open_files", 256),
        read_chunk_bytes=data.get("read_chunk_bytes", MiB),
        poll_interval_s=float(data.get("poll_interval_s", 0.25)),
        scan_interval_s=float(data.get("scan_interval_s", 10.0)),
        checkpoint_interval_s=float(data.get("checkpoint_interval_s", 1.0)),
        rotated_close_s=float(data.get("rotated_close_s", 5.0)),
        shutdown_timeout_s=float(data.get("shutdown_timeout_s", 30.0)),
        fingerprint_bytes=data.get("fingerprint_bytes", 1024),
        watch=data.get("watch", True),
        metrics_port=metrics.get("port"),
        metrics_bind=metrics.get("bind", "127.0.0.1"),
        log_level=level,
        producer=ProducerConfig(
            acks=producer.get("acks", 1),
            linger_ms=float(producer.get("linger_ms", 20)),
            batch_bytes=producer.get("batch_bytes", MiB),
            batch_messages=producer.get("batch_messages", 10_000),
            compression=producer.get("compression", "none"),
            delivery_timeout_s=float(producer.get("delivery_timeout_s", 60.0)),
            request_timeout_s=float(producer.get("request_timeout_s", 30.0)),
            retry_backoff_ms=float(producer.get("retry_backoff_ms", 100)),
        ),
        audit=AuditConfig(
            enabled=audit.get("enabled", True),
            topic=_topic(audit.get("topic", "_audit"), "audit.topic"),
            window_s=float(audit.get("window_s", 60.0)),
        ),
    )
    _check_limits(config)
    return config


def _check_limits(config: AgentConfig) -> None:
    """Cross-key rules: the in-flight cap must hold what one file may hold unsent."""
    for i, source in enumerate(config.sources):
        held = source.max_line_bytes + (source.multiline.max_bytes if source.multiline else 0)
        if held * 2 > config.max_inflight_bytes:
            raise ConfigError(f"sources[{i}].max_line_bytes",
                              f"with multiline.max_bytes it may hold {held} bytes per file; "
                              f"raise max_inflight_bytes to at least {held * 2}")
    if config.read_chunk_bytes > config.max_inflight_bytes:
        raise ConfigError("read_chunk_bytes", "must not exceed max_inflight_bytes")
    if config.audit.window_s < 1:
        raise ConfigError("audit.window_s", "must be at least 1 second")


def load_config(path: str | Path) -> AgentConfig:
    """Read and validate an agent config file."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("", f"config file {path} does not exist") from None
    except PermissionError:
        raise ConfigError("", f"config file {path} is not readable (permission denied)") from None
    except IsADirectoryError:
        raise ConfigError("", f"config file {path} is a directory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{path} is not valid TOML: {exc}") from None
    return parse_config(data, base_dir=path.parent)
