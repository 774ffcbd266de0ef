"""The mirror's TOML config, validated up front; every error names the offending key.

Layout (see etc/mirror.toml)::

    [source]  zk_connect            the cluster to copy from (connect string with chroot)
    [target]  zk_connect            the cluster to copy into
    [mirror]  group, topics | pattern, exclude, on_gap, start, ... (defaults below)
    [metrics] port, host, status_file
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.errors import MirrorConfigError

ON_GAP = ("stop", "skip")


@dataclass(frozen=True)
class MirrorConfig:
    """Everything one mirror process needs."""

    source_zk: str
    """Source cluster's ZooKeeper connect string, chroot included."""
    target_zk: str
    """Target cluster's ZooKeeper connect string, chroot included."""
    target_acks: int | str = 1
    """1: the target's leader appended; "all": every in-sync replica of it has the batch."""
    group: str = "logferry-mirror"
    """Consumer group on the source; mirror processes sharing it share the partitions."""
    topics: tuple[str, ...] = ()
    """Explicit topic names (exclusive with ``pattern``)."""
    pattern: str | None = None
    """Regular expression a topic name must match in full (exclusive with ``topics``)."""
    exclude: tuple[str, ...] = ()
    """Regular expressions (full match) of topics never mirrored."""
    on_gap: str = "stop"
    """Resume offset deleted by retention: ``stop`` the partition, or ``skip`` the gap."""
    start: str = "earliest"
    """Where a partition without a committed position starts."""
    consumer_id: str | None = None
    fetch_max_bytes: int = 1024 * 1024
    poll_max_bytes: int = 8 * 1024 * 1024
    """Bytes handed to the target per round (each round ends with every ack)."""
    queue_bytes: int = 16 * 1024 * 1024
    commit_interval_ms: int = 1000
    session_timeout_s: float = 6.0
    delivery_timeout_s: float = 3600.0
    """The producer retries a batch this long (target down) before the mirror gives up."""
    shutdown_timeout_s: float = 30.0
    """On SIGTERM, wait this long for in-flight batches; then exit without committing them."""
    metrics_port: int = 0
    """Prometheus text on this port (0: none)."""
    metrics_host: str = "127.0.0.1"
    status_file: str | None = None
    """JSON status this process rewrites every few seconds (read by ``mirror status``)."""
    source_path: Path | None = field(default=None, compare=False)

    def topic_regex(self) -> str:
        """One regex (full match) for the group's pattern subscription, excludes folded in.

        A list becomes an alternation of escaped names; excludes become a negative
        lookahead, so the ordinary pattern subscription picks up new topics.
        """
        base = self.pattern if self.pattern is not None else "|".join(map(re.escape, self.topics))
        if not self.exclude:
            return f"(?:{base})"
        excluded = "|".join(f"(?:{e})" for e in self.exclude)
        return f"(?!(?:{excluded})$)(?:{base})"

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is mirrored."""
        return re.fullmatch(self.topic_regex(), topic) is not None


def load_config(path: str | Path) -> MirrorConfig:
    """Read and validate a TOML file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MirrorConfigError("--config", f"no such file: {path}") from None
    except OSError as exc:
        raise MirrorConfigError("--config", f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise MirrorConfigError("--config", f"{path} is not valid TOML: {exc}") from None
    return parse_config(data, path)


def _table(data: dict, name: str, required: bool) -> dict:
    value = data.get(name, None)
    if value is None:
        if required:
            raise MirrorConfigError(f"[{name}]", "missing table")
        return {}
    if not isinstance(value, dict):
        raise MirrorConfigError(f"[{name}]", "must be a table")
    return value


def _get(table: dict, section: str, key: str, kind: type | tuple, default: Any) -> Any:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) and kind is not bool:
        raise MirrorConfigError(f"{section}.{key}", f"expected {_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise MirrorConfigError(f"{section}.{key}", f"expected {_name(kind)}, got {value!r}")
    return value


def _name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"str": "a string", "int": "an integer", "float": "a number",
                        "list": "a list"}.get(k.__name__, k.__name__) for k in kinds)


def _positive(section: str, key: str, value: float) -> float:
    if value <= 0:
        raise MirrorConfigError(f"{section}.{key}", f"must be positive, not {value}")
    return value


def _regex(key: str, value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise MirrorConfigError(key, f"{value!r} is not a regular expression: {exc}") from None
    return value


def _strings(section: str, key: str, table: dict) -> tuple[str, ...]:
    values = _get(table, section, key, list, [])
    if not all(isinstance(v, str) and v for v in values):
        raise MirrorConfigError(f"{section}.{key}", "must be a list of non-empty strings")
    return tuple(values)


def _zk(section: str, table: dict) -> str:
    value = _get(table, section, "zk_connect", str, None)
    if not value:
        raise MirrorConfigError(f"{section}.zk_connect", "required: a ZooKeeper connect string "
                                "with the cluster's chroot, e.g. 127.0.0.1:2181/logferry/live")
    if "/" not in value or value.endswith("/"):
        raise MirrorConfigError(f"{section}.zk_connect", f"{value!r} needs a chroot "
                                "(host:port/path): each cluster lives under its own")
    return value


KNOWN = {
    "source": {"zk_connect"},
    "target": {"zk_connect", "acks"},
    "mirror": {"group", "topics", "pattern", "exclude", "on_gap", "start", "consumer_id",
               "fetch_max_bytes", "poll_max_bytes", "queue_bytes", "commit_interval_ms",
               "session_timeout_s", "delivery_timeout_s", "shutdown_timeout_s"},
    "metrics": {"port", "host", "status_file"},
}


def parse_config(data: dict, path: Path | None = None) -> MirrorConfig:
    """Validate a parsed TOML document (unknown keys are errors: typos must not pass)."""
    for name in data:
        if name not in KNOWN:
            raise MirrorConfigError(f"[{name}]", f"unknown table (known: {', '.join(sorted(KNOWN))})")
    tables = {name: _table(data, name, name in ("source", "target", "mirror")) for name in KNOWN}
    for name, table in tables.items():
        for key in table:
            if key not in KNOWN[name]:
                raise MirrorConfigError(f"{name}.{key}", f"unknown key (known: {', '.join(sorted(KNOWN[name]))})")
    source, target = _zk("source", tables["source"]), _zk("target", tables["target"])
    acks = tables["target"].get("acks", 1)
    if acks not in (1, "all") or isinstance(acks, bool):
        raise MirrorConfigError("target.acks", f'must be 1 or "all", not {acks!r}: the mirror '
                                "commits source offsets only after the target acknowledged")
    if source == target:
        raise MirrorConfigError("target.zk_connect", "is the source cluster: a mirror needs two")
    m, s = tables["mirror"], "mirror"
    group = _get(m, s, "group", str, "logferry-mirror")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", group):
        raise MirrorConfigError("mirror.group", f"{group!r} must match [A-Za-z0-9._-]{{1,249}}")
    topics = _strings(s, "topics", m)
    pattern = _get(m, s, "pattern", str, None)
    if bool(topics) == (pattern is not None):
        raise MirrorConfigError("mirror.topics", "give exactly one of mirror.topics (a list) "
                                "or mirror.pattern (a regex)")
    if pattern is not None:
        _regex("mirror.pattern", pattern)
    exclude = tuple(_regex("mirror.exclude", e) for e in _strings(s, "exclude", m))
    on_gap = _get(m, s, "on_gap", str, "stop")
    if on_gap not in ON_GAP:
        raise MirrorConfigError("mirror.on_gap", f"must be 'stop' or 'skip', not {on_gap!r}")
    start = _get(m, s, "start", str, "earliest")
    if start not in ("earliest", "latest"):
        raise MirrorConfigError("mirror.start", f"must be 'earliest' or 'latest', not {start!r}")
    ints = {k: int(_positive(s, k, _get(m, s, k, int, d))) for k, d in (
        ("fetch_max_bytes", 1024 * 1024), ("poll_max_bytes", 8 * 1024 * 1024),
        ("queue_bytes", 16 * 1024 * 1024), ("commit_interval_ms", 1000))}
    floats = {k: float(_positive(s, k, _get(m, s, k, (int, float), d))) for k, d in (
        ("session_timeout_s", 6.0), ("delivery_timeout_s", 3600.0), ("shutdown_timeout_s", 30.0))}
    mt = tables["metrics"]
    port = _get(mt, "metrics", "port", int, 0)
    if not 0 <= port <= 65535:
        raise MirrorConfigError("metrics.port", f"must be 0 (off) or a TCP port, not {port}")
    status_file = _get(mt, "metrics", "status_file", str, None) or None
    if status_file is not None and path is not None and not Path(status_file).is_absolute():
        status_file = str(path.parent / status_file)
    return MirrorConfig(
        source_zk=source, target_zk=target, target_acks=acks, group=group, topics=topics, pattern=pattern,
        exclude=exclude, on_gap=on_gap, start=start,
        consumer_id=_get(m, s, "consumer_id", str, None) or None,
        metrics_port=port, metrics_host=_get(mt, "metrics", "host", str, "127.0.0.1"),
        status_file=status_file, source_path=path, **ints, **floats)


__all__ = ["MirrorConfig", "load_config", "parse_config"]
