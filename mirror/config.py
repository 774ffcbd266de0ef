"""The mirror's TOML config, validated up front; every error names the offending key.

Read and checked with :mod:`broker.common.config` (the error format and path rule every
component shares: a relative ``status_file`` is relative to the config file's directory).

Layout (see etc/mirror.toml)::

    [source]  zk_connect            the cluster to copy from (connect string with chroot)
    [target]  zk_connect            the cluster to copy into
    [mirror]  group, topics | pattern, exclude, on_gap, start, ... (defaults below)
    [metrics] port, host, status_file
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.client import AGENTS_TOPIC
from broker.common.config import (
    NONNEG_INT,
    PORT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    STR_LIST,
    STRING,
    TABLE,
    Check,
    Validator,
    fields,
    one_of,
    read,
)
from broker.common.names import NAME_RULE, TRANSACTION_STATE_TOPIC, is_valid_name
from broker.common.sasl import SaslCredentials, sasl_section
from broker.common.tls import TlsConfig, tls_section
from broker.common.zk_security import with_security, zookeeper_section
from mirror.errors import MirrorConfigError

ON_GAP = ("stop", "skip")
MODES = ("preserve", "produce")
"""``preserve``: byte-identical target partitions, resumed from the target's log end
(mirror.preserve); ``produce``: batches re-produced at the target's end, resumed from
the group's committed source positions (mirror.core)."""
FETCH_WINDOW_BYTES = 128 * 1024 * 1024
MAX_FETCH_WINDOW_BYTES = 256 * 1024 * 1024
"""Half the client's 512 MiB frame limit: one fetch answer never comes near it."""
COMPRESSION = ("none", "gzip", "lz4", "zstd")
"""The batch codecs (broker.client.CODECS); see MirrorConfig.compression."""


@dataclass(frozen=True)
class MirrorConfig:
    """Everything one mirror process needs."""

    source_zk: str
    """Source cluster's ZooKeeper connect string, chroot included."""
    target_zk: str
    """Target cluster's ZooKeeper connect string, chroot included."""
    target_acks: int | str = 1
    """1: the target's leader appended; "all": every in-sync replica of it has the batch."""
    mode: str = "preserve"
    """``preserve`` (default): the target partition is a byte-identical copy of the source
    (same offsets), resumed from the target's own log end: nothing is copied twice and a
    diverged target is reported, never spliced. ``produce``: the re-producing mirror
    (target offsets differ; needed for ``compression`` and for target topics with other
    partition counts); a crash copies the uncommitted tail again."""
    request_timeout_s: float = 30.0
    """preserve mode: an append unanswered this long (a stalled target) is given up and
    the partition resumes from the target's log end. Both modes: a request about target
    topics (metadata, creation) unanswered this long counts as the target away."""
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
    fetch_max_bytes: int = 4 * 1024 * 1024
    poll_max_bytes: int = 8 * 1024 * 1024
    """Bytes taken from the consumer per poll."""
    max_inflight_bytes: int = 32 * 1024 * 1024
    """Stored bytes sent to the target and not yet acknowledged (the pipeline's window)."""
    fetch_requests_per_broker: int = 4
    """Fetches in flight per source broker (each for a share of its partitions)."""
    fetch_window_bytes: int = FETCH_WINDOW_BYTES
    """Most bytes asked from one source broker at once. Within it the bytes asked per
    partition grow from ``fetch_max_bytes`` with the measured rate x round trip, so a WAN
    does not cap the copy (broker.client.group.window); 0 keeps ``fetch_max_bytes``."""
    max_request_bytes: int = 1024 * 1024
    """Produce requests to the target up to this size: a broker appends many 1 MiB requests
    for far less CPU than few 16 MiB ones (benchmarks/mirror_throughput.py)."""
    queue_bytes: int = 64 * 1024 * 1024
    commit_interval_ms: int = 1000
    session_timeout_s: float = 6.0
    delivery_timeout_s: float = 3600.0
    """The producer retries a batch this long (target down) before the mirror gives up."""
    shutdown_timeout_s: float = 30.0
    """On SIGTERM, wait this long for in-flight batches; then exit without committing them."""
    refused_retry_s: float = 30.0
    """A topic the target refuses for want of an ACL halts alone and is tried again this
    often, so granting the ACL resumes it without a restart (mirror/refusals.py)."""
    compression: str = "none"
    """Codec given to batches that arrive uncompressed before they cross to the target.
    ``none`` (the default) copies every batch byte for byte: the agent's batches arrive
    zstd-compressed already, and both clusters then hold identical logs. Compressed
    batches are always copied as they are (docs/benchmarks.md, "Compression")."""
    audit_topic: str = "_audit.mirror"
    """The target's topic the mirror publishes its own audit counts to ("": no audit). Not
    ``_audit`` itself: that one is a copy of the source's (byte for byte in preserve mode)."""
    audit_window_s: float = 60.0
    """Window of the mirror's audit records (the agents' ``[audit] window_s``)."""
    metrics_port: int = 0
    """Prometheus text on this port (0: none)."""
    metrics_host: str = "127.0.0.1"
    status_file: str | None = None
    """JSON status this process rewrites every few seconds (read by ``mirror status``)."""
    source_path: Path | None = field(default=None, compare=False)
    source_tls: TlsConfig | None = None
    """``[source.tls]``: TLS to the source cluster's brokers (None: plaintext)."""
    target_tls: TlsConfig | None = None
    """``[target.tls]``: TLS to the target cluster's brokers (None: plaintext)."""
    source_sasl: SaslCredentials | None = None
    """``[source.sasl]``: SCRAM credentials toward the source cluster (None: none)."""
    target_sasl: SaslCredentials | None = None
    """``[target.sasl]``: SCRAM credentials toward the target cluster (None: none)."""
    source_listener: str | None = None
    """``[source] listener``: the source brokers' named listener (None: the default one)."""
    target_listener: str | None = None
    """``[target] listener``: the target brokers' named listener (None: the default one)."""
    metrics_tls: TlsConfig | None = None
    """``[metrics.tls]``: serve the metrics over HTTPS with this certificate (None: HTTP)."""

    def topic_regex(self) -> str:
        """One regex (full match) for the group's pattern subscription, excludes folded in.

        A list becomes an alternation of escaped names; excludes become a negative
        lookahead, so the ordinary pattern subscription picks up new topics.
        """
        base = self.pattern if self.pattern is not None else "|".join(map(re.escape, self.topics))
        excluded = "|".join(f"(?:{e})" for e in (*self.exclude, *self.never_copied()))
        return f"(?!(?:{excluded})$)(?:{base})"

    def never_copied(self) -> tuple[str, ...]:
        """Regexes of the topics no mirror copies: a cluster's own status, not data (the
        agents' heartbeats describe the agents of the cluster they publish to; a mirror's
        audit counts live on its target; the transaction coordinators' state is the
        source cluster's, and only brokers write it)."""
        return tuple(map(re.escape, (AGENTS_TOPIC, self.audit_topic, TRANSACTION_STATE_TOPIC)))

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is mirrored."""
        return re.fullmatch(self.topic_regex(), topic) is not None


def load_config(path: str | Path) -> MirrorConfig:
    """Read and validate a TOML file (errors name the file and the key)."""
    data, validator = read(path, MirrorConfigError)
    return _parse(data, validator, Path(path))


SECTIONS = {
    "source": fields(zk_connect=STRING, tls=TABLE, sasl=TABLE, zookeeper=TABLE, listener=STRING),
    "target": fields(
        zk_connect=STRING,
        tls=TABLE,
        sasl=TABLE,
        zookeeper=TABLE,
        acks=Check(
            one_of(1, "all").test, ('1 or "all" (the mirror commits source offsets only after the target acknowledged)')
        ),
        listener=STRING,
    ),
    "mirror": fields(
        group=STRING,
        topics=STR_LIST,
        pattern=STRING,
        exclude=STR_LIST,
        on_gap=STRING,
        start=STRING,
        consumer_id=STRING,
        fetch_max_bytes=POSITIVE_INT,
        poll_max_bytes=POSITIVE_INT,
        max_inflight_bytes=POSITIVE_INT,
        queue_bytes=POSITIVE_INT,
        fetch_requests_per_broker=POSITIVE_INT,
        fetch_window_bytes=NONNEG_INT,
        max_request_bytes=POSITIVE_INT,
        commit_interval_ms=POSITIVE_INT,
        session_timeout_s=POSITIVE_NUMBER,
        delivery_timeout_s=POSITIVE_NUMBER,
        shutdown_timeout_s=POSITIVE_NUMBER,
        refused_retry_s=POSITIVE_NUMBER,
        compression=STRING,
        mode=STRING,
        request_timeout_s=POSITIVE_NUMBER,
        audit_topic=STRING,
        audit_window_s=POSITIVE_NUMBER,
    ),
    "metrics": fields(port=PORT, host=STRING, status_file=STRING, tls=TABLE),
}
"""Every table and key of the mirror's config (docs/mirror.md lists the defaults)."""
REQUIRED_TABLES = ("source", "target", "mirror")


def _regex(v: Validator, key: str, value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        v.fail(key, f"{value!r} is not a regular expression: {exc}")
    return value


def _zk(v: Validator, section: str, table: dict[str, Any]) -> str:
    value = table.get("zk_connect")
    if not value:
        v.fail(
            f"{section}.zk_connect",
            "required: a ZooKeeper connect string with the cluster's chroot, e.g. 127.0.0.1:2181/logferry/live",
        )
    v.zk_connect(f"{section}.zk_connect", value)
    if "/" not in value:
        v.fail(f"{section}.zk_connect", f"{value!r} needs a chroot (host:port/path): each cluster lives under its own")
    # [source.zookeeper] / [target.zookeeper]: the login and TLS travel with the string
    return with_security(value, zookeeper_section(v, table, where=section))


def parse_config(data: dict[str, Any], path: Path | None = None) -> MirrorConfig:
    """Validate a parsed TOML document (unknown keys are errors: typos must not pass).

    ``path`` is the file it came from: errors name it and a relative ``status_file`` is
    taken from its directory (without it, from the working directory).
    """
    validator = (
        Validator(error=MirrorConfigError)
        if path is None
        else Validator(file=str(path), base_dir=path.parent.absolute(), error=MirrorConfigError)
    )
    return _parse(data, validator, path)


def _parse(data: dict[str, Any], v: Validator, path: Path | None) -> MirrorConfig:
    tables = v.sections(data, SECTIONS, REQUIRED_TABLES)
    source, target = _zk(v, "source", tables["source"]), _zk(v, "target", tables["target"])
    acks = tables["target"].get("acks", 1)
    if source == target:
        v.fail("target.zk_connect", "is the source cluster: a mirror needs two")
    m = tables["mirror"]
    group = m.get("group", "logferry-mirror")
    if not is_valid_name(group):
        v.fail("mirror.group", f"{group!r} must be {NAME_RULE}")
    topics = tuple(m.get("topics", ()))
    pattern = m.get("pattern")
    if bool(topics) == (pattern is not None):
        v.fail("mirror.topics", "give exactly one of mirror.topics (a list) or mirror.pattern (a regex)")
    if pattern is not None:
        _regex(v, "mirror.pattern", pattern)
    exclude = tuple(_regex(v, "mirror.exclude", e) for e in m.get("exclude", ()))
    on_gap = m.get("on_gap", "stop")
    if on_gap not in ON_GAP:
        v.fail("mirror.on_gap", f"must be 'stop' or 'skip', not {on_gap!r}")
    start = m.get("start", "earliest")
    if start not in ("earliest", "latest"):
        v.fail("mirror.start", f"must be 'earliest' or 'latest', not {start!r}")
    window = m.get("fetch_window_bytes", FETCH_WINDOW_BYTES)
    if window > MAX_FETCH_WINDOW_BYTES:
        v.fail(
            "mirror.fetch_window_bytes",
            f"{window} is more than one fetch answer may carry "
            f"({MAX_FETCH_WINDOW_BYTES} bytes, the client's frame limit); 128 MiB covers "
            "50 ms at 2 GB/s",
        )
    compression = m.get("compression", "none")
    if compression not in COMPRESSION:
        v.fail("mirror.compression", f"must be one of {', '.join(COMPRESSION)}, not {compression!r}")
    # compression re-encodes batches, so a config that asks for it (without naming a
    # mode) gets the re-producing mode; naming "preserve" with it is an error
    mode = m.get("mode", "preserve" if compression == "none" else "produce")
    if mode not in MODES:
        v.fail("mirror.mode", f"must be 'preserve' or 'produce', not {mode!r}")
    if mode == "preserve" and compression != "none":
        v.fail(
            "mirror.compression",
            f"{compression!r} re-encodes batches, so the target "
            'cannot be a byte-identical copy: set mirror.mode = "produce" with it, or '
            'compression = "none"',
        )
    mt = tables["metrics"]
    status_file = mt.get("status_file") or None
    if status_file is not None:
        status_file = str(v.path(status_file))
    return MirrorConfig(
        source_zk=source,
        target_zk=target,
        target_acks=acks,
        group=group,
        topics=topics,
        pattern=pattern,
        exclude=exclude,
        on_gap=on_gap,
        start=start,
        consumer_id=m.get("consumer_id") or None,
        metrics_port=mt.get("port", 0),
        metrics_host=mt.get("host", "127.0.0.1"),
        status_file=status_file,
        source_path=path,
        fetch_max_bytes=m.get("fetch_max_bytes", 4 * 1024 * 1024),
        poll_max_bytes=m.get("poll_max_bytes", 8 * 1024 * 1024),
        max_inflight_bytes=m.get("max_inflight_bytes", 32 * 1024 * 1024),
        fetch_requests_per_broker=m.get("fetch_requests_per_broker", 4),
        fetch_window_bytes=window,
        max_request_bytes=m.get("max_request_bytes", 1024 * 1024),
        queue_bytes=m.get("queue_bytes", 64 * 1024 * 1024),
        commit_interval_ms=m.get("commit_interval_ms", 1000),
        session_timeout_s=float(m.get("session_timeout_s", 6.0)),
        delivery_timeout_s=float(m.get("delivery_timeout_s", 3600.0)),
        shutdown_timeout_s=float(m.get("shutdown_timeout_s", 30.0)),
        compression=compression,
        refused_retry_s=float(m.get("refused_retry_s", 30.0)),
        mode=mode,
        request_timeout_s=float(m.get("request_timeout_s", 30.0)),
        audit_topic=m.get("audit_topic", "_audit.mirror"),
        audit_window_s=float(m.get("audit_window_s", 60.0)),
        source_tls=tls_section(v, tables["source"], where="source"),
        target_tls=tls_section(v, tables["target"], where="target"),
        source_sasl=sasl_section(v, tables["source"], where="source"),
        target_sasl=sasl_section(v, tables["target"], where="target"),
        source_listener=tables["source"].get("listener") or None,
        target_listener=tables["target"].get("listener") or None,
        metrics_tls=tls_section(v, mt, where="metrics", server=True),
    )


__all__ = ["MirrorConfig", "load_config", "parse_config"]
