"""The landing job's TOML configuration (``etc/loader.toml``), validated up front.

Every mistake is reported as a :class:`LoaderConfigError` naming the file and the key
(``etc/loader.toml: load.chunk_bytes: must be a positive integer, got 0``, the format
and path rule of :mod:`broker.common.config`), before Spark starts, so a bad
nightly config fails in a second rather than after a JVM start. The reference with every
key and default is ``docs/loader.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from broker.common.config import (
    BOOL,
    NONEMPTY_STR,
    NONNEG_INT,
    NONNEG_NUMBER,
    POSITIVE_INT,
    STR_LIST,
    TABLE,
    Check,
    Validator,
    fields,
    format_error,
    one_of,
    read,
)
from broker.common.errors import ConfigError
from broker.common.names import NAME_RULE, is_valid_name
from broker.common.sasl import (
    DEFAULT_MECHANISM,
    SASL_FIELDS,
    SaslCredentials,
    password_from_env,
    read_password_file,
    sasl_from_table,
)
from broker.common.tls import TLS_FIELDS, TlsConfig, tls_from_table
from broker.common.zk_security import with_security, zookeeper_section
from hadoop_loader.errors import LoaderConfigError

MiB = 1024 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class SourceConfig:
    """Which cluster to read and which topics to land."""

    topics: tuple[str, ...]
    zk: str | None = None
    """ZooKeeper connect string with the cluster's chroot (``host:port/logferry/analysis``)."""
    brokers: tuple[str, ...] | None = None
    """Static ``host:port`` list, instead of ``zk``."""
    listener: str | None = None
    """The brokers' named listener to reach them on (None: the default one)."""
    decode_agent_records: frozenset[str] = frozenset()
    """Topics whose values are agent records (msgpack maps) to decode into columns."""
    field_columns: dict[str, str] = field(default_factory=dict)
    """Agent record fields landed as typed columns too: name -> type (field_columns.TYPES)."""


@dataclass(frozen=True)
class OutputConfig:
    """Where and how the Parquet output is written."""

    uri: str
    """Root of the output tree as a URI: ``file:///...`` or ``hdfs://namenode:8020/...``."""
    filesystem: str = "auto"
    """``auto`` (Python for file://, Hadoop otherwise), ``local`` or ``hadoop``."""
    max_records_per_file: int = 5_000_000
    """Spark's ``maxRecordsPerFile``: the upper bound on a Parquet file's rows."""
    files_per_hour: int = 1
    """N >= 1: shuffle rows by hour so a run writes N files per topic and event hour;
    0: no shuffle, each task writes one file per event hour it reads (Iceberg: 0 or 1)."""
    compression: str = "snappy"
    format: str = "parquet"
    """``parquet``: files under ``topic=/dt=/hr=`` with the loader's manifests; ``iceberg``:
    an Apache Iceberg table per topic in a Hadoop catalog whose warehouse is ``uri``
    (:mod:`hadoop_loader.iceberg`)."""
    namespace: str = "logferry"
    """With ``format = "iceberg"``: the tables' namespace (``<uri>/<namespace>/<topic>``)."""
    drop_decoded_values: bool = True
    """Leave the raw ``value`` bytes out of the Parquet for rows whose value decoded as an
    agent record (``decoded`` true): the columns hold all of it. Values that did not
    decode, and topics not decoded, keep ``value``."""


@dataclass(frozen=True)
class LoadConfig:
    """How much to read per run and how to split it."""

    max_bytes_per_partition: int = 1024 * MiB
    """At most this many log bytes per topic-partition per run (the rest waits)."""
    chunk_bytes: int = 64 * MiB
    """Split a partition's range into Spark input partitions of about this size."""
    fetch_bytes: int = 8 * MiB
    """Bytes asked for per fetch request by the executors."""
    on_retention_gap: str = "fail"
    """``fail``: stop naming the gap; ``skip``: start at the first retained offset and report."""
    first_run: str = "earliest"
    """Where a topic-partition never landed before starts: ``earliest`` or ``latest``."""
    timezone: str = "UTC"
    """Time zone of the ``dt=``/``hr=`` directories."""


@dataclass(frozen=True)
class AuditConfig:
    """Comparison of landed counts with the agents' audit topic."""

    enabled: bool = False
    topic: str = "_audit"
    stage: str = "agent"
    """Audit records of this stage give the expected counts."""
    count: str = "acked"
    """Which audit field is expected: ``sent`` or ``acked``."""
    lookback_hours: int = 48
    """Audit hours from this long before the run's start."""
    settle_minutes: int = 10
    """Hours ending less than this before the run's start are reported, not judged."""
    require_complete: float | None = None
    """Fail (exit 3) when a judged hour is below this fraction; None = report only."""


@dataclass(frozen=True)
class DedupConfig:
    """Dropping rows whose record identity was already landed (``[dedup]``)."""

    enabled: bool = False
    """On: rows whose agent record identity (topic, host, file_id, file_offset) was
    landed by this run or a recent one are dropped and counted (needs decoded topics)."""
    keep_hours: int = 168
    """Identities of the runs committed this long before a run are consulted: a copy
    arriving later than that lands again (and the state stays bounded)."""


@dataclass(frozen=True)
class MaintenanceConfig:
    """``logferry load --maintain`` on Iceberg tables (``[maintenance]``)."""

    target_file_bytes: int = 512 * MiB
    """Compaction rewrites each hour's files into files of up to this size (one per
    hour unless an hour holds more)."""
    expire_after_hours: int = 168
    """Snapshots older than this are expired (never the newest one carrying the
    loader's offsets, nor the last ``keep_snapshots``)."""
    keep_snapshots: int = 1
    """Snapshots kept whatever their age (Iceberg's ``retain_last``)."""
    orphan_after_hours: int = 72
    """Files in a table's folder that no snapshot references and older than this (a
    killed run's data files) are deleted; younger ones may belong to a write in flight
    (Iceberg's procedure refuses less than 24 hours for that reason)."""


@dataclass(frozen=True)
class SparkConfig:
    """How the job's SparkSession is built."""

    master: str | None = None
    """None: spark-submit's master if any, else ``local[*]``."""
    app_name: str = "logferry-load"
    driver_memory: str | None = None
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SaslSource:
    """Whom to authenticate as, and where each process reads the password.

    The password itself never travels in the data source's options (Spark keeps them
    in query plans and may log them): the driver and every executor read it from the
    same file path or environment variable. Built from ``[sasl]`` here and from the data
    source's options by :mod:`hadoop_loader.options`.
    """

    username: str
    mechanism: str = DEFAULT_MECHANISM
    password_file: str | None = None
    password_env: str | None = None

    def credentials(self) -> SaslCredentials:
        """Read the password now (ConfigError naming the file or variable)."""
        if self.password_file is not None:
            password = read_password_file(Path(self.password_file))
        elif self.password_env is not None:
            password = password_from_env(self.password_env)
        else:
            raise ConfigError("SASL: no password_file or password_env given")
        return SaslCredentials(self.username, password, self.mechanism)


@dataclass(frozen=True)
class LoaderConfig:
    """The whole ``loader.toml``."""

    source: SourceConfig
    output: OutputConfig
    load: LoadConfig = LoadConfig()
    audit: AuditConfig = AuditConfig()
    spark: SparkConfig = SparkConfig()
    dedup: DedupConfig = DedupConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    path: str = "<dict>"
    tls: TlsConfig | None = None
    """``[tls]``: TLS to the source brokers, from the driver and from every executor
    (the files must exist at the same paths on the executors' hosts)."""
    sasl: SaslSource | None = None
    """``[sasl]``: SCRAM credentials toward the source brokers; the driver and every
    executor read the password from the same ``password_file`` or ``password_env``."""

    def sasl_credentials(self) -> SaslCredentials | None:
        """The driver's SASL credentials (None: none)."""
        return self.sasl.credentials() if self.sasl is not None else None


# -- declared keys (types; defaults live in the dataclasses above) ------------------------

SECTIONS = {
    "source": fields(
        ("topics",),
        zk=NONEMPTY_STR,
        brokers=STR_LIST,
        listener=NONEMPTY_STR,
        topics=STR_LIST,
        zookeeper=TABLE,
        decode_agent_records=Check(lambda v: BOOL.test(v) or STR_LIST.test(v), "true, false or a list of topics"),
        field_columns=TABLE,
    ),
    "output": fields(
        ("uri",),
        uri=NONEMPTY_STR,
        filesystem=one_of("auto", "local", "hadoop"),
        max_records_per_file=POSITIVE_INT,
        files_per_hour=NONNEG_INT,
        compression=one_of("snappy", "zstd", "gzip", "lz4", "none"),
        format=one_of("parquet", "iceberg"),
        namespace=Check(lambda v: isinstance(v, str) and _IDENTIFIER.fullmatch(v) is not None, "an identifier"),
        drop_decoded_values=BOOL,
    ),
    "load": fields(
        max_bytes_per_partition=POSITIVE_INT,
        chunk_bytes=POSITIVE_INT,
        fetch_bytes=POSITIVE_INT,
        on_retention_gap=one_of("fail", "skip"),
        first_run=one_of("earliest", "latest"),
        timezone=NONEMPTY_STR,
    ),
    "audit": fields(
        enabled=BOOL,
        topic=NONEMPTY_STR,
        stage=NONEMPTY_STR,
        count=one_of("sent", "acked"),
        lookback_hours=POSITIVE_INT,
        settle_minutes=NONNEG_INT,
        require_complete=Check(lambda v: NONNEG_NUMBER.test(v) and v <= 1, "a number between 0 and 1"),
    ),
    "dedup": fields(enabled=BOOL, keep_hours=POSITIVE_INT),
    "maintenance": fields(
        target_file_bytes=POSITIVE_INT,
        expire_after_hours=NONNEG_INT,
        keep_snapshots=POSITIVE_INT,
        orphan_after_hours=Check(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 24, "at least 24"),
    ),
    "spark": fields(
        master=NONEMPTY_STR,
        app_name=NONEMPTY_STR,
        driver_memory=NONEMPTY_STR,
        conf=Check(
            lambda v: isinstance(v, dict) and all(isinstance(x, (str, int, float, bool)) for x in v.values()),
            "a table of strings",
        ),
    ),
    "tls": TLS_FIELDS,
    "sasl": SASL_FIELDS,
}
"""Every table and key of ``loader.toml`` (docs/loader.md lists the defaults)."""


def config_error(key: str, problem: str, file: str = "") -> LoaderConfigError:
    """The loader's config error, in the one format of logferry config errors."""
    return LoaderConfigError(format_error(file, key, problem), key=key, file=file)


def load_config(path: str | Path) -> LoaderConfig:
    """Read and validate a loader config file (errors name the file and the key)."""
    data, validator = read(path, config_error)
    return _build(data, validator)


def config_from_dict(data: dict[str, Any], source: str = "", base_dir: Path | None = None) -> LoaderConfig:
    """Validate a parsed config (a dict shaped like the TOML file).

    ``source`` names it in errors; a plain relative ``output.uri`` is taken from
    ``base_dir`` (default: the working directory).
    """
    validator = (
        Validator(file=source, error=config_error)
        if base_dir is None
        else Validator(file=source, base_dir=base_dir, error=config_error)
    )
    return _build(data, validator)


def _build(data: dict[str, Any], v: Validator) -> LoaderConfig:
    sections = v.sections(data, SECTIONS)
    return LoaderConfig(
        source=_source(v, sections["source"]),
        output=_output(v, sections["output"]),
        load=_load(v, sections["load"]),
        audit=AuditConfig(**sections["audit"]),
        spark=_spark(sections["spark"]),
        dedup=_dedup(v, sections["dedup"], sections["source"]),
        maintenance=_maintenance(v, sections["maintenance"], sections["output"]),
        path=v.file or "<dict>",
        tls=tls_from_table(v, sections["tls"], "tls"),
        sasl=_sasl(v, sections["sasl"]),
    )


def _sasl(v: Validator, table: dict[str, Any]) -> SaslSource | None:
    if "password" in table:
        v.fail(
            "sasl.password",
            "the loader's executors read the password themselves: "
            "give password_file (the same path on every host) or password_env",
        )
    if sasl_from_table(v, table, "sasl") is None:  # checks it, and reads the password now
        return None
    password_file = table.get("password_file")
    return SaslSource(
        table["username"],
        table.get("mechanism", DEFAULT_MECHANISM),
        str(v.path(password_file)) if password_file else None,
        table.get("password_env"),
    )


def check_topic_name(name: str, where: str, file: str = "") -> None:
    """Raise naming ``where`` (and ``file``) unless ``name`` is a valid topic name."""
    if not is_valid_name(name):
        raise config_error(where, f"{name!r} is not a valid topic name ({NAME_RULE})", file)


def _source(v: Validator, s: dict[str, Any]) -> SourceConfig:
    if ("zk" in s) == ("brokers" in s):
        v.fail(
            "source",
            "set exactly one of source.zk (ZooKeeper connect string with chroot) or source.brokers (list of host:port)",
        )
    if "zk" in s:
        v.zk_connect("source.zk", s["zk"])
    if "brokers" in s:
        if not s["brokers"]:
            v.fail("source.brokers", "must not be empty")
        for i, address in enumerate(s["brokers"]):
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                v.fail(f"source.brokers[{i}]", f"{address!r} must look like host:port")
    topics = tuple(s["topics"])
    if not topics:
        v.fail("source.topics", "must name at least one topic")
    if len(set(topics)) != len(topics):
        v.fail("source.topics", "lists a topic twice")
    for topic in topics:
        check_topic_name(topic, "source.topics", v.file)
    decode = s.get("decode_agent_records", False)
    if decode is True:
        decoded = frozenset(topics)
    elif decode is False:
        decoded = frozenset()
    else:
        stray = sorted(set(decode) - set(topics))
        if stray:
            v.fail("source.decode_agent_records", f"names {stray[0]!r}, which is not in source.topics")
        decoded = frozenset(decode)
    columns = _field_columns(v, s.get("field_columns", {}), decoded)
    security = zookeeper_section(v, s, where="source")
    if security is not None and "zk" not in s:
        v.fail("source.zookeeper", "set only with source.zk (source.brokers reaches no ZooKeeper)")
    return SourceConfig(
        topics=topics,
        listener=s.get("listener"),
        zk=with_security(s["zk"], security) if "zk" in s else None,
        brokers=tuple(s["brokers"]) if "brokers" in s else None,
        decode_agent_records=decoded,
        field_columns=columns,
    )


def _field_columns(v: Validator, table: dict[str, Any], decoded: frozenset[str]) -> dict[str, str]:
    """``source.field_columns``: field name -> type; each a new column of that name."""
    from hadoop_loader.arrowconv import spark_schema
    from hadoop_loader.field_columns import TYPES

    if table and not decoded:
        v.fail("source.field_columns", "needs source.decode_agent_records (fields come from decoded agent records)")
    taken = set(spark_schema(True).fieldNames()) | {"dt", "hr"}
    for name, kind in table.items():
        where = f"source.field_columns.{name}"
        if not _IDENTIFIER.fullmatch(name):
            v.fail(where, "a column name must be letters, digits and _ (not starting with a digit)")
        if name in taken:
            v.fail(where, f"{name!r} is already a column; the field stays in fields[{name!r}]")
        if kind not in TYPES:
            v.fail(where, f"must be one of {', '.join(map(repr, TYPES))}, got {kind!r}")
    return dict(table)


def _output(v: Validator, o: dict[str, Any]) -> OutputConfig:
    uri = normalize_uri(o.pop("uri"), v.base_dir, "output.uri", v.file)
    if o.get("filesystem") == "local" and not uri.startswith("file:"):
        v.fail("output.filesystem", f"'local' needs a file:// output.uri, got {uri!r}")
    if o.get("format") == "iceberg" and o.get("files_per_hour", 1) > 1:
        v.fail(
            "output.files_per_hour",
            f"is 0 or 1 for Iceberg tables (1: one file per hour and load; 0: no shuffle), got {o['files_per_hour']}",
        )
    return OutputConfig(uri=uri, **o)


def normalize_uri(value: str, base_dir: Path | None, where: str, file: str = "") -> str:
    """A URI for the output root: plain paths become ``file://`` URIs (relative to the
    config file's folder), trailing slashes are dropped."""
    parsed = urlparse(value)
    if not parsed.scheme:
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return path.resolve().as_uri()
    if parsed.scheme == "file" and (parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/")):
        raise config_error(where, f"must be file:///absolute/path, got {value!r}", file)
    if parsed.path.rstrip("/") == "":
        raise config_error(where, f"must name a directory below the filesystem root, got {value!r}", file)
    if parsed.scheme == "file":
        return "file://" + parsed.path.rstrip("/")
    return value.rstrip("/")


def _load(v: Validator, d: dict[str, Any]) -> LoadConfig:
    config = LoadConfig(**d)
    if config.chunk_bytes < 64 * 1024:
        v.fail("load.chunk_bytes", f"must be at least 65536 (64 KiB), got {config.chunk_bytes}")
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(config.timezone)
    except Exception:
        v.fail("load.timezone", f"{config.timezone!r} is not a known time zone (e.g. 'UTC', 'America/Los_Angeles')")
    return config


def _dedup(v: Validator, d: dict[str, Any], source: dict[str, Any]) -> DedupConfig:
    config = DedupConfig(**d)
    if config.enabled and source.get("decode_agent_records", False) in (False, []):
        v.fail(
            "dedup.enabled",
            "needs source.decode_agent_records (a record's identity "
            "is in the decoded agent record: host, file_id, file_offset)",
        )
    return config


def _maintenance(v: Validator, m: dict[str, Any], output: dict[str, Any]) -> MaintenanceConfig:
    if m and output.get("format", "parquet") != "iceberg":
        v.fail("maintenance", "is for output.format = 'iceberg' (Parquet output is never rewritten)")
    return MaintenanceConfig(**m)


def _spark(d: dict[str, Any]) -> SparkConfig:
    conf = {str(k): _conf_value(v) for k, v in d.pop("conf", {}).items()}
    return SparkConfig(conf=conf, **d)


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
