"""The console's settings: a TOML file with one ``[[cluster]]`` per cluster, or ``--zk``.

::

    [console]
    host = "127.0.0.1"      # bind address (default: loopback only)
    port = 8300             # 0 picks a free port (the log line names it)
    interval_s = 1.0        # how often each cluster is read (updates reach the page within 2 s)
    audit_settle_s = 60     # an audit window is judged this long after it ended (and a window length)

    [[cluster]]
    name = "live"
    zk_connect = "zk1:2181/logferry/live"

    [[cluster]]
    name = "analysis"
    zk_connect = "zk1:2181/logferry/analysis"
    [cluster.tls]           # optional: the shared [tls] keys (broker/common/tls.py)
    enabled = true
    ca_file = "certs/ca.pem"
    [cluster.sasl]          # optional: the shared [sasl] keys (broker/common/sasl.py)
    username = "reader"
    password_file = "secrets/reader.password"
    [cluster.zookeeper]     # optional: its ZooKeeper login (broker/common/zk_security.py)
    user = "reader"
    password_file = "secrets/zk-reader.password"

    [[lake]]                # optional: the loader's output, for the landed tier (read-only)
    path = "/data/lake"     # its output.uri: a folder, file:// or hdfs://namenode:8020/...
    cluster = "analysis"    # the cluster it loads from (default: the last one)
    timezone = "UTC"        # its load.timezone (the event hours the landed tier names)
    format = "auto"         # its output.format: parquet, iceberg or auto (found in the lake)
    namespace = "logferry"  # with iceberg: its output.namespace (the tables' folder)
    webhdfs = "http://namenode:9870"  # with hdfs://: the NameNode's WebHDFS (default: its host, port 9870)

Each cluster's ``tls`` and ``sasl`` go to every client the console makes toward it (its
Admin, SimpleConsumer and GroupAdmin); a read-only principal (``consume`` on the topics)
is enough, since the console never writes.
"""

from __future__ import annotations

import re
import urllib.parse
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.common.config import (
    NONEMPTY_STR,
    PORT,
    POSITIVE_NUMBER,
    STRING,
    TABLE,
    TABLE_LIST,
    Check,
    Validator,
    fields,
    one_of,
    read,
)
from broker.common.errors import ConfigError
from broker.common.names import validate_topic_name
from broker.common.sasl import SaslCredentials, sasl_section
from broker.common.tls import TlsConfig, tls_section
from broker.common.zk_security import with_security, zookeeper_section
from console.landed import FORMATS

DEFAULT_PORT = 8300
MAX_INTERVAL_S = 2.0
"""The page must show a change within 2 s: reading less often than this is refused."""


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster the console shows."""

    name: str
    zk_connect: str
    tls: TlsConfig | None = None
    """``[cluster.tls]``: TLS toward its brokers (None: plaintext)."""
    sasl: SaslCredentials | None = None
    """``[cluster.sasl]``: SCRAM credentials toward its brokers (None: none)."""


@dataclass(frozen=True)
class LakeConfig:
    """A lake the loader lands into: the console shows its landed tier (read-only)."""

    path: str
    """The loader's ``output.uri``: a local directory, a ``file://`` or an ``hdfs://`` URI."""
    cluster: str
    """The console cluster the loader reads from (its tier comes before "landed")."""
    timezone: str = "UTC"
    """The loader's ``load.timezone``: the event hours the landed tier names."""
    name: str = "lake"
    format: str = "auto"
    """The loader's ``output.format`` (``parquet``, ``iceberg``), or ``auto``: found in the lake."""
    namespace: str = "logferry"
    """With Iceberg: the loader's ``output.namespace`` (``<path>/<namespace>/<table>``)."""
    webhdfs: str | None = None
    """With an ``hdfs://`` path: the NameNode's WebHDFS address (``http://host:port``);
    None: the path's host on port 9870."""


@dataclass(frozen=True)
class ConsoleConfig:
    """Where the console listens and which clusters it reads."""

    clusters: tuple[ClusterConfig, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    interval_s: float = 1.0
    audit_topic: str = "_audit"
    extra: dict[str, Any] = field(default_factory=dict)
    lakes: tuple[LakeConfig, ...] = ()
    audit_settle_s: float = 60.0
    """An audit window is coloured only this long after it ended (:mod:`console.audit`)."""


_NAMESPACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A folder name (the loader's output.namespace is an identifier, a stricter rule)."""
_SECTIONS = {
    "console": fields(
        host=NONEMPTY_STR, port=PORT, interval_s=POSITIVE_NUMBER, audit_topic=STRING, audit_settle_s=POSITIVE_NUMBER
    ),
}
_LAKE = fields(
    ("path",),
    {"path": "the loader's output.uri (a local directory, file:// or hdfs:// URI)"},
    path=NONEMPTY_STR,
    cluster=NONEMPTY_STR,
    timezone=NONEMPTY_STR,
    name=NONEMPTY_STR,
    format=one_of(*FORMATS),
    namespace=Check(lambda v: isinstance(v, str) and _NAMESPACE.fullmatch(v) is not None, "a folder name"),
    webhdfs=NONEMPTY_STR,
)
_CLUSTER = fields(
    ("name", "zk_connect"),
    {"zk_connect": "where the cluster registers"},
    name=NONEMPTY_STR,
    zk_connect=NONEMPTY_STR,
    tls=TABLE,
    sasl=TABLE,
    zookeeper=TABLE,
)


def parse_config(doc: dict[str, Any], validator: Validator | None = None) -> ConsoleConfig:
    """Validate a parsed document (ConfigError naming the file and key)."""
    v = validator or Validator()
    clusters_raw = doc.get("cluster", [])
    if not TABLE_LIST.test(clusters_raw):
        v.fail("cluster", "must be an array of tables ([[cluster]])")
    lakes_raw = doc.get("lake", [])
    if not TABLE_LIST.test(lakes_raw):
        v.fail("lake", "must be an array of tables ([[lake]])")
    rest = {k: val for k, val in doc.items() if k not in ("cluster", "lake")}
    console = v.sections(rest, _SECTIONS)["console"]
    clusters = []
    for i, raw in enumerate(clusters_raw):
        where = f"cluster[{i}]"
        table = v.check(raw, _CLUSTER, where)
        connect = v.zk_connect(f"{where}.zk_connect", table["zk_connect"])
        clusters.append(
            ClusterConfig(
                table["name"],  # [cluster.zookeeper]: its ZooKeeper login
                with_security(connect, zookeeper_section(v, table, where=where)),
                tls=tls_section(v, table, where=where),
                sasl=sasl_section(v, table, where=where),
            )
        )
    lakes = [v.check(raw, _LAKE, f"lake[{i}]") for i, raw in enumerate(lakes_raw)]
    return _finish(v, clusters, console, lakes)


def _lakes(v: Validator, clusters: Sequence[ClusterConfig], tables: Sequence[dict[str, Any]]) -> tuple[LakeConfig, ...]:
    """Checked lakes: a known cluster (default: the last one, the analysis cluster) and
    time zone; names default to ``lake``, ``lake2``..."""
    out = []
    names = [c.name for c in clusters]
    for i, table in enumerate(tables):
        cluster = table.get("cluster") or (names[-1] if names else "")
        if cluster not in names:
            v.fail(f"lake[{i}].cluster", f"{cluster!r} is none of the clusters ({', '.join(names)})")
        timezone = table.get("timezone", "UTC")
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            v.fail(
                f"lake[{i}].timezone",
                f"{timezone!r} is not a known time zone (the loader's load.timezone, such as UTC or Europe/Paris)",
            )
        out.append(
            LakeConfig(
                table["path"],
                cluster,
                timezone,
                table.get("name") or ("lake" if i == 0 else f"lake{i + 1}"),
                table.get("format", "auto"),
                table.get("namespace", "logferry"),
                _location(v, i, table["path"], table.get("webhdfs")),
            )
        )
    return tuple(out)


def _location(v: Validator, i: int, path: str, webhdfs: str | None) -> str | None:
    """A lake's location checked (a folder, ``file://`` or ``hdfs://host...``) and its
    WebHDFS address, returned (None: an ``hdfs://`` path's default, its host on port 9870)."""
    scheme = urllib.parse.urlsplit(path).scheme
    if scheme not in ("", "file", "hdfs"):
        v.fail(f"lake[{i}].path", f"{path!r}: a local directory, a file:// or an hdfs:// URI")
    if scheme == "hdfs" and not urllib.parse.urlsplit(path).hostname:
        v.fail(f"lake[{i}].path", f"{path!r} names no NameNode (hdfs://host:port/path)")
    if webhdfs is None:
        return None
    if scheme != "hdfs":
        v.fail(f"lake[{i}].webhdfs", f"only for an hdfs:// path; {path!r} is read from the local file system")
    url = urllib.parse.urlsplit(webhdfs)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme not in ("http", "https") or not url.hostname or port is None or url.path not in ("", "/"):
        v.fail(
            f"lake[{i}].webhdfs",
            f"{webhdfs!r}: the NameNode's WebHDFS address, http://host:port (its dfs.namenode.http-address)",
        )
    return webhdfs


def _finish(
    v: Validator, clusters: Sequence[ClusterConfig], console: dict[str, Any], lakes: Sequence[dict[str, Any]] = ()
) -> ConsoleConfig:
    if not clusters:
        v.fail("cluster", "missing: name at least one cluster ([[cluster]] or --zk)")
    names = [c.name for c in clusters]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        v.fail("cluster", f"cluster names must differ: {', '.join(dupes)} twice")
    interval = float(console.get("interval_s", 1.0))
    if interval > MAX_INTERVAL_S:
        v.fail("console.interval_s", f"at most {MAX_INTERVAL_S} (the page updates within 2 s)")
    audit = console.get("audit_topic", "_audit")
    try:
        validate_topic_name(audit)
    except ConfigError as exc:
        v.fail("console.audit_topic", str(exc))
    return ConsoleConfig(
        tuple(clusters),
        console.get("host", "127.0.0.1"),
        console.get("port", DEFAULT_PORT),
        interval,
        audit,
        lakes=_lakes(v, clusters, lakes),
        audit_settle_s=float(console.get("audit_settle_s", 60.0)),
    )


def load_config(path: str | Path) -> ConsoleConfig:
    """Read and validate a console TOML file."""
    doc, validator = read(path)
    return parse_config(doc, validator)


def from_zk(
    zk: Sequence[str],
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    interval_s: float = 1.0,
    tls: TlsConfig | None = None,
    sasl: SaslCredentials | None = None,
    lakes: Sequence[str] = (),
) -> ConsoleConfig:
    """Settings from ``--zk`` options: ``NAME=CONNECT`` or a bare connect string (named
    after its chroot's last part, ``live`` for ``.../logferry/live``). ``tls`` and
    ``sasl`` (from ``--tls-*``/``--sasl-*``) apply to every cluster named. ``lakes``
    (``--lake``): ``[CLUSTER=]PATH``, the loader's output read from that cluster (default
    the last one), event hours in UTC."""
    v = Validator()
    clusters = []
    for i, item in enumerate(zk):
        name, sep, connect = item.partition("=")
        if not sep or "/" in name or ":" in name:
            name, connect = "", item
        connect = v.zk_connect(f"--zk[{i}]", connect)
        if not name:
            chroot = connect.partition("/")[2]
            name = chroot.rstrip("/").rsplit("/", 1)[-1] or f"cluster{i + 1}"
        clusters.append(ClusterConfig(name, connect, tls, sasl))
    lake_tables = []
    for item in lakes:
        cluster, sep, path = item.partition("=")
        lake_tables.append({"cluster": cluster, "path": path} if sep and "/" not in cluster else {"path": item})
    return _finish(v, clusters, {"host": host, "port": port, "interval_s": interval_s}, lake_tables)


__all__ = ["ClusterConfig", "ConsoleConfig", "LakeConfig", "DEFAULT_PORT", "from_zk", "load_config", "parse_config"]
