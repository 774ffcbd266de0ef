"""The agent's TOML configuration, validated at start with errors that name the key.

Every key, its type and default is listed in docs/agent.md; etc/agent.toml is a
working example. Validation happens once, here, with :mod:`broker.common.config` (the
error format and path rule every component shares): a wrong type, an unknown key (with
a suggestion when it looks like a typo), a regex that does not compile or a topic name
the broker would refuse all raise :class:`~agent.errors.ConfigError` naming the file
and the key, e.g. ``agent.toml: sources[1].pattern: must be an absolute glob pattern``.
A relative ``state_dir`` is relative to the config file's directory.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from broker.common.config import (
    BOOL,
    NONEMPTY_STR,
    NONEMPTY_STR_LIST,
    NONNEG_NUMBER,
    PORT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    STR_LIST,
    TABLE,
    TABLE_LIST,
    Check,
    Validator,
    either,
    fields,
    one_of,
    read,
)
from broker.common.names import NAME_RULE, is_valid_name
from broker.common.sasl import SaslCredentials, sasl_section
from broker.common.tls import TlsConfig, tls_section
from broker.common.zk_security import with_security, zookeeper_section

Scalar = str | int | float | bool
"""A static field's value (TOML strings, integers, floats, booleans)."""

MiB = 1024 * 1024


@dataclass(frozen=True)
class MultilineConfig:
    """Which lines continue the message before them (see agent.multiline)."""

    continuation: re.Pattern[bytes] | None
    start: re.Pattern[bytes] | None
    max_bytes: int = MiB
    timeout_s: float = 2.0


@dataclass(frozen=True)
class ParseConfig:
    """How a source's lines are parsed into fields (see agent.parsing)."""

    format: str
    """``json``: a JSON object line's members; ``regex``: the named groups of ``regex``."""
    regex: re.Pattern[bytes] | None = None


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
    fields: tuple[tuple[str, Scalar], ...] = ()
    """Static fields: the global ``fields`` extended and overridden by the source's own."""
    parse: ParseConfig | None = None


@dataclass(frozen=True)
class ProducerConfig:
    """Options passed to ``broker.client.Producer`` (see docs/client.md)."""

    acks: int | str = 1
    """1: the leader appended; "all": every in-sync replica has it (replicated topics)."""
    linger_ms: float = 20
    batch_bytes: int = MiB
    batch_messages: int = 10_000
    compression: str = "zstd"
    """Batch codec; zstd: best ratio on logs, cheap to write (docs/benchmarks.md)."""
    delivery_timeout_s: float = 60.0
    request_timeout_s: float = 30.0
    retry_backoff_ms: float = 100


@dataclass(frozen=True)
class AuditConfig:
    """Where and how often the agent publishes its audit counts."""

    enabled: bool = True
    topic: str = "_audit"
    window_s: float = 60.0
    agents_topic: str = "_agents"
    """Where the agent's heartbeat goes (agent/heartbeat.py): host, version, files, lag."""
    heartbeat_s: float = 10.0
    """Seconds between heartbeats (0: none); off with the audit."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything an agent process needs to start."""

    sources: tuple[SourceConfig, ...]
    state_dir: Path
    zk: str | None = None
    brokers: tuple[str, ...] | None = None
    tls: TlsConfig | None = None
    """``[tls]``: TLS to the brokers (None: plaintext)."""
    sasl: SaslCredentials | None = None
    """``[sasl]``: SCRAM credentials toward the brokers (None: none)."""
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
    resume_from_cluster: bool = True
    """At start, skip the lines after the checkpoint the cluster already holds (agent.resume)."""
    resume_max_bytes: int = 64 * MiB
    """At most this many bytes of a partition's tail are read for that at start."""
    metrics_port: int | None = None
    metrics_bind: str = "127.0.0.1"
    metrics_tls: TlsConfig | None = None
    """``[metrics.tls]``: serve the status endpoints over HTTPS (None: HTTP)."""
    listener: str | None = None
    """``[cluster] listener``: the brokers' named listener (None: the default one)."""
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


# -- declared keys (types; defaults live in the dataclasses above) ------------------------

STR_OR_LIST = either(NONEMPTY_STR, Check(NONEMPTY_STR_LIST.test, "list of strings"))

TOP = fields(
    ("state_dir",),
    {"state_dir": "where the checkpoint file lives"},
    host=NONEMPTY_STR,
    state_dir=NONEMPTY_STR,
    max_inflight_bytes=POSITIVE_INT,
    max_open_files=POSITIVE_INT,
    read_chunk_bytes=POSITIVE_INT,
    poll_interval_s=POSITIVE_NUMBER,
    scan_interval_s=POSITIVE_NUMBER,
    checkpoint_interval_s=POSITIVE_NUMBER,
    rotated_close_s=NONNEG_NUMBER,
    shutdown_timeout_s=POSITIVE_NUMBER,
    fingerprint_bytes=POSITIVE_INT,
    watch=BOOL,
    log_level=NONEMPTY_STR,
    resume_from_cluster=BOOL,
    resume_max_bytes=POSITIVE_INT,
    cluster=TABLE,
    producer=TABLE,
    fields=TABLE,
    audit=TABLE,
    metrics=TABLE,
    tls=TABLE,
    sasl=TABLE,
    zookeeper=TABLE,
    sources=Check(TABLE_LIST.test, "an array of tables ([[sources]])"),
)
CLUSTER = fields(zk=NONEMPTY_STR, brokers=STR_LIST, listener=NONEMPTY_STR)
PRODUCER = fields(
    acks=Check(one_of(0, 1, "all").test, '1 or "all"'),
    linger_ms=NONNEG_NUMBER,
    batch_bytes=POSITIVE_INT,
    batch_messages=POSITIVE_INT,
    compression=NONEMPTY_STR,
    delivery_timeout_s=POSITIVE_NUMBER,
    request_timeout_s=POSITIVE_NUMBER,
    retry_backoff_ms=NONNEG_NUMBER,
)
AUDIT = fields(
    enabled=BOOL, topic=NONEMPTY_STR, window_s=POSITIVE_NUMBER, agents_topic=NONEMPTY_STR, heartbeat_s=NONNEG_NUMBER
)
METRICS = fields(port=PORT, bind=NONEMPTY_STR, tls=TABLE)
SOURCE = fields(
    ("pattern", "topic"),
    {"pattern": "every source needs one", "topic": "every source needs one"},
    name=NONEMPTY_STR,
    pattern=STR_OR_LIST,
    exclude=STR_OR_LIST,
    topic=NONEMPTY_STR,
    key=NONEMPTY_STR,
    start_at=NONEMPTY_STR,
    max_line_bytes=POSITIVE_INT,
    partial_line_timeout_s=POSITIVE_NUMBER,
    idle_close_s=POSITIVE_NUMBER,
    time_pattern=NONEMPTY_STR,
    time_format=NONEMPTY_STR,
    time_zone=NONEMPTY_STR,
    multiline=TABLE,
    fields=TABLE,
    parse=TABLE,
)
PARSE = fields(("format",), {"format": "'json' or 'regex'"}, format=one_of("json", "regex"), regex=NONEMPTY_STR)
MULTILINE = fields(continuation=NONEMPTY_STR, start=NONEMPTY_STR, max_bytes=POSITIVE_INT, timeout_s=POSITIVE_NUMBER)


def _as_tuple(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _regex(v: Validator, value: str, key: str) -> re.Pattern[bytes]:
    try:
        return re.compile(value.encode("utf-8"))
    except re.error as exc:
        v.fail(key, f"not a valid regular expression: {exc}")


def _topic(v: Validator, value: str, key: str) -> str:
    if not is_valid_name(value):
        v.fail(key, f"{value!r} is not a valid topic name ({NAME_RULE})")
    return value


def _multiline(v: Validator, source: dict[str, Any], where: str) -> MultilineConfig:
    table = v.table(source, "multiline", MULTILINE, where)
    where = f"{where}.multiline"
    if ("continuation" in table) == ("start" in table):
        v.fail(where, "give exactly one of 'continuation' and 'start'")
    return MultilineConfig(
        continuation=_regex(v, table["continuation"], f"{where}.continuation") if "continuation" in table else None,
        start=_regex(v, table["start"], f"{where}.start") if "start" in table else None,
        max_bytes=table.get("max_bytes", MiB),
        timeout_s=float(table.get("timeout_s", 2.0)),
    )


def _fields(v: Validator, table: dict[str, Any], where: str) -> dict[str, Scalar]:
    """A ``fields`` table: names to strings, numbers or booleans."""
    for name, value in table.items():
        if not name:
            v.fail(where, "a field name must not be empty")
        if not isinstance(value, (str, int, float, bool)):
            v.fail(f"{where}.{name}", f"must be a string, number or boolean, got {value!r}")
    return dict(table)


def _parse_rule(v: Validator, source: dict[str, Any], where: str) -> ParseConfig:
    table = v.table(source, "parse", PARSE, where)
    where = f"{where}.parse"
    if table["format"] == "json":
        if "regex" in table:
            v.fail(f"{where}.regex", "given with format = 'json' (only 'regex' uses it)")
        return ParseConfig("json")
    if "regex" not in table:
        v.fail(f"{where}.regex", "missing (required with format = 'regex')")
    regex = _regex(v, table["regex"], f"{where}.regex")
    if not regex.groupindex:
        v.fail(
            f"{where}.regex", "needs at least one named group (?P<name>...): the groups' names are the fields' names"
        )
    return ParseConfig("regex", regex)


def _source(
    v: Validator, table: dict[str, Any], index: int, host: str, global_fields: dict[str, Scalar]
) -> SourceConfig:
    where = f"sources[{index}]"
    v.check(table, SOURCE, where)
    patterns = _as_tuple(table["pattern"])
    for pattern in patterns:
        if not pattern.startswith("/"):
            v.fail(f"{where}.pattern", f"{pattern!r} must be an absolute glob pattern")
        if pattern.endswith("/"):
            v.fail(f"{where}.pattern", f"{pattern!r} names a directory, not files")
    start_at = table.get("start_at", "beginning")
    if start_at not in ("beginning", "end"):
        v.fail(f"{where}.start_at", f"must be 'beginning' or 'end', got {start_at!r}")
    zone = table.get("time_zone", "local")
    if zone not in ("local", "UTC"):
        v.fail(f"{where}.time_zone", f"must be 'local' or 'UTC', got {zone!r}")
    time_pattern = None
    if "time_pattern" in table:
        time_pattern = _regex(v, table["time_pattern"], f"{where}.time_pattern")
        if "time" not in time_pattern.groupindex:
            v.fail(f"{where}.time_pattern", "needs a named group (?P<time>...)")
        if "time_format" not in table:
            v.fail(f"{where}.time_format", "missing (required with time_pattern)")
    elif "time_format" in table:
        v.fail(f"{where}.time_format", "given without time_pattern")
    max_line = table.get("max_line_bytes", MiB)
    if max_line < 64:
        v.fail(f"{where}.max_line_bytes", "must be at least 64")
    multiline = _multiline(v, table, where) if "multiline" in table else None
    own = _fields(v, table["fields"], f"{where}.fields") if "fields" in table else {}
    return SourceConfig(
        name=table.get("name", patterns[0]),
        patterns=patterns,
        topic=_topic(v, table["topic"], f"{where}.topic"),
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
        fields=tuple({**global_fields, **own}.items()),
        parse=_parse_rule(v, table, where) if "parse" in table else None,
    )


def parse_config(data: dict[str, Any], base_dir: Path | None = None, file: str = "") -> AgentConfig:
    """Validate a parsed TOML document and build the config.

    Relative paths are taken from ``base_dir`` (the config file's directory; default: the
    working directory); ``file`` names the document in errors.
    """
    validator = (
        Validator(file=file, error=ConfigError)
        if base_dir is None
        else Validator(file=file, base_dir=base_dir, error=ConfigError)
    )
    return _parse(data, validator)


def _with_zookeeper(v: Validator, data: dict[str, Any], zk: str | None) -> str | None:
    """``cluster.zk`` carrying the ``[zookeeper]`` login and TLS (broker.common.zk_security)."""
    security = zookeeper_section(v, data)
    if security is not None and zk is None:
        v.fail("zookeeper", "set only with cluster.zk (cluster.brokers reaches no ZooKeeper)")
    return zk if zk is None else with_security(zk, security)


def _parse(data: dict[str, Any], v: Validator) -> AgentConfig:
    v.check(data, TOP)
    host = data.get("host") or socket.gethostname()
    cluster = v.table(data, "cluster", CLUSTER)
    if ("zk" in cluster) == ("brokers" in cluster):
        v.fail("cluster", "give exactly one of 'zk' (connect string with chroot) and 'brokers' (list of host:port)")
    if "zk" in cluster:
        v.zk_connect("cluster.zk", cluster["zk"])
    for i, address in enumerate(cluster.get("brokers", [])):
        host_part, _, port = address.rpartition(":")
        if not host_part or not port.isdigit():
            v.fail(f"cluster.brokers[{i}]", f"{address!r} is not host:port")
    state_dir = v.path(data["state_dir"])
    if not data.get("sources"):
        v.fail("sources", "missing: add at least one [[sources]] table")
    global_fields = _fields(v, data["fields"], "fields") if "fields" in data else {}
    sources = tuple(_source(v, t, i, host, global_fields) for i, t in enumerate(data["sources"]))
    names = [s.name for s in sources]
    for i, name in enumerate(names):
        if names.index(name) != i:
            v.fail(f"sources[{i}].name", f"{name!r} is used by another source")
    producer = v.table(data, "producer", PRODUCER)
    if producer.get("acks", 1) == 0:
        v.fail("producer.acks", 'must be 1 or "all": the checkpoint advances on acks only')
    if producer.get("compression", "zstd") not in ("none", "gzip", "lz4", "zstd"):
        v.fail("producer.compression", "must be 'none', 'gzip', 'lz4' or 'zstd'")
    audit = v.table(data, "audit", AUDIT)
    metrics = v.table(data, "metrics", METRICS)
    level = data.get("log_level", "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        v.fail("log_level", "must be DEBUG, INFO, WARNING or ERROR")
    config = AgentConfig(
        sources=sources,
        state_dir=state_dir,
        zk=_with_zookeeper(v, data, cluster.get("zk")),
        brokers=tuple(cluster["brokers"]) if "brokers" in cluster else None,
        tls=tls_section(v, data),
        sasl=sasl_section(v, data),
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
        resume_from_cluster=data.get("resume_from_cluster", True),
        resume_max_bytes=data.get("resume_max_bytes", 64 * MiB),
        metrics_port=metrics.get("port"),
        metrics_bind=metrics.get("bind", "127.0.0.1"),
        metrics_tls=tls_section(v, metrics, where="metrics", server=True),
        listener=cluster.get("listener"),
        log_level=level,
        producer=ProducerConfig(
            acks=producer.get("acks", 1),
            linger_ms=float(producer.get("linger_ms", 20)),
            batch_bytes=producer.get("batch_bytes", MiB),
            batch_messages=producer.get("batch_messages", 10_000),
            compression=producer.get("compression", "zstd"),
            delivery_timeout_s=float(producer.get("delivery_timeout_s", 60.0)),
            request_timeout_s=float(producer.get("request_timeout_s", 30.0)),
            retry_backoff_ms=float(producer.get("retry_backoff_ms", 100)),
        ),
        audit=AuditConfig(
            enabled=audit.get("enabled", True),
            topic=_topic(v, audit.get("topic", "_audit"), "audit.topic"),
            window_s=float(audit.get("window_s", 60.0)),
            agents_topic=_topic(v, audit.get("agents_topic", "_agents"), "audit.agents_topic"),
            heartbeat_s=float(audit.get("heartbeat_s", 10.0)),
        ),
    )
    _check_limits(v, config)
    return config


def _check_limits(v: Validator, config: AgentConfig) -> None:
    """Cross-key rules: the in-flight cap must hold what one file may hold unsent."""
    for i, source in enumerate(config.sources):
        held = source.max_line_bytes + (source.multiline.max_bytes if source.multiline else 0)
        if held * 2 > config.max_inflight_bytes:
            v.fail(
                f"sources[{i}].max_line_bytes",
                f"with multiline.max_bytes it may hold {held} bytes per file; "
                f"raise max_inflight_bytes to at least {held * 2}",
            )
    if config.read_chunk_bytes > config.max_inflight_bytes:
        v.fail("read_chunk_bytes", "must not exceed max_inflight_bytes")
    if config.audit.window_s < 1:
        v.fail("audit.window_s", "must be at least 1 second")


def load_config(path: str | Path) -> AgentConfig:
    """Read and validate an agent config file (errors name the file and the key)."""
    data, validator = read(path, ConfigError)
    return _parse(data, validator)
