"""The ``logferry`` data source's options, parsed and validated once.

Option names are case-insensitive (Spark's convention); a wrong value raises
:class:`LoaderConfigError` naming the option. The full table is in ``docs/loader.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from broker.common.config import Validator
from broker.common.errors import ConfigError
from broker.common.sasl import (
    DEFAULT_MECHANISM,
    MECHANISMS,
    SaslCredentials,
)
from broker.common.tls import TlsConfig, tls_from_table
from broker.common.zk_connect import validate_zk_connect
from hadoop_loader.config import SaslSource, check_topic_name
from hadoop_loader.errors import LoaderConfigError
from hadoop_loader.offsets import EARLIEST, LATEST, OffsetSpec, parse_offset_spec
from hadoop_loader.planning import Chunk

MiB = 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """How executors reach the cluster (picklable, hashable: the consumer cache key)."""

    zk: str | None
    brokers: tuple[str, ...] | None
    tls: TlsConfig | None = None
    """TLS to the brokers (each process builds its own context from the files)."""
    sasl: SaslSource | None = None
    """SCRAM credentials toward the brokers (each process reads its password)."""
    listener: str | None = None
    """The brokers' named listener (option ``listener``; None: the default one)."""

    def credentials(self) -> SaslCredentials | None:
        """The SASL credentials for a client of this process (None: none)."""
        return self.sasl.credentials() if self.sasl is not None else None


@dataclass(frozen=True)
class SourceOptions:
    """Everything the reader needs, from ``.option(...)`` calls."""

    endpoint: Endpoint
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_bytes_per_partition: int = 64 * MiB
    """Target size of one Spark input partition (a chunk of a topic-partition's range)."""
    fetch_bytes: int = 8 * MiB
    decode: frozenset[str] = frozenset()
    """Topics whose values are decoded as agent records."""
    agent_columns: bool = False
    """Whether the schema has the agent columns (``decodeAgentRecords`` was given)."""
    skip_gaps: bool = False
    chunks: tuple[Chunk, ...] | None = None
    """A plan made by the landing job: read exactly these chunks, plan nothing."""


NO_TRIGGER_LIMIT = (
    "option maxBytesPerTrigger: PySpark 4.1 (pinned for Apache Iceberg's Spark runtime, see pyproject.toml) "
    "gives Python streaming sources no admission control, so a micro-batch cannot be capped; leave the option "
    "out (each micro-batch reads up to the visible ends) or cap the landing job with load.max_bytes_per_partition"
)
"""Why ``maxBytesPerTrigger`` (PySpark 4.2's ``ReadMaxBytes``) is refused under the 4.1 pin."""

KNOWN = {
    "zk",
    "brokers",
    "topics",
    "startingoffsets",
    "endingoffsets",
    "maxbytesperpartition",
    "fetchbytes",
    "decodeagentrecords",
    "onretentiongap",
    "chunks",
    "path",
    "listener",
    "tls",
    "tlscafile",
    "tlscertfile",
    "tlskeyfile",
    "tlsserverhostname",
    "tlsverifyhostname",
    "saslusername",
    "saslmechanism",
    "saslpasswordfile",
    "saslpasswordenv",
}

TLS_OPTIONS = {
    "ca_file": "tlsCaFile",
    "cert_file": "tlsCertFile",
    "key_file": "tlsKeyFile",
    "server_hostname": "tlsServerHostname",
    "verify_hostname": "tlsVerifyHostname",
}
"""``[tls]`` key -> data source option (the loader passes its section on to executors)."""


def tls_options(tls: TlsConfig | None) -> dict[str, str]:
    """The data source options that carry ``tls`` to the executors ({} for plaintext)."""
    if tls is None:
        return {}
    options = {"tls": "true", "tlsVerifyHostname": str(tls.verify_hostname).lower()}
    for key in ("ca_file", "cert_file", "key_file", "server_hostname"):
        value = getattr(tls, key)
        if value is not None:
            options[TLS_OPTIONS[key]] = str(value)
    return options


SASL_OPTIONS = {
    "username": "saslUsername",
    "mechanism": "saslMechanism",
    "password_file": "saslPasswordFile",
    "password_env": "saslPasswordEnv",
}
"""``[sasl]`` key -> data source option (no password: see :class:`SaslSource`)."""


def sasl_options(sasl: SaslSource | None) -> dict[str, str]:
    """The data source options that carry ``sasl`` to the executors ({} for none)."""
    if sasl is None:
        return {}
    return {SASL_OPTIONS[k]: str(v) for k, v in vars(sasl).items() if v is not None}


def _parse_sasl(options: dict[str, str]) -> SaslSource | None:
    given = {k: options[v.lower()] for k, v in SASL_OPTIONS.items() if v.lower() in options}
    if not given:
        return None
    if "username" not in given:
        raise LoaderConfigError("option saslUsername is missing (SASL options were given)")
    if ("password_file" in given) == ("password_env" in given):
        raise LoaderConfigError("give exactly one of the options saslPasswordFile and saslPasswordEnv")
    mechanism = given.get("mechanism", DEFAULT_MECHANISM)
    if mechanism not in MECHANISMS:
        raise LoaderConfigError(f"option saslMechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    return SaslSource(given["username"], mechanism, given.get("password_file"), given.get("password_env"))


def _parse_tls(options: dict[str, str]) -> TlsConfig | None:
    table: dict[str, object] = {
        k: options[v.lower()] for k, v in TLS_OPTIONS.items() if v.lower() in options and k != "verify_hostname"
    }
    verify = options.get("tlsverifyhostname", "true").lower()
    if verify not in ("true", "false"):
        raise LoaderConfigError(f"option tlsVerifyHostname must be true or false, got {verify!r}")
    tls = options.get("tls", "true" if table else "false").lower()
    if tls not in ("true", "false"):
        raise LoaderConfigError(f"option tls must be true or false, got {tls!r}")
    table.update(enabled=tls == "true", verify_hostname=verify == "true")
    return tls_from_table(Validator(error=_tls_option_error), table, where="")


def _tls_option_error(key: str, problem: str, file: str) -> LoaderConfigError:
    """A TLS option's error; module level so the Endpoint holding it pickles (Spark ships
    it to the executors)."""
    return LoaderConfigError(f"option {TLS_OPTIONS.get(key, key)}: {problem}")


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate the options given to ``spark.read.format("logferry")``."""
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    if "maxbytespertrigger" in options:
        raise LoaderConfigError(NO_TRIGGER_LIMIT)
    unknown = sorted(set(options) - KNOWN)
    if unknown:
        raise LoaderConfigError(
            f"unknown logferry option {unknown[0]!r}; known options: "
            "zk, brokers, topics, startingOffsets, endingOffsets, "
            "maxBytesPerPartition, fetchBytes, decodeAgentRecords, "
            "onRetentionGap"
        )
    zk = options.get("zk") or None
    brokers = tuple(b.strip() for b in options.get("brokers", "").split(",") if b.strip()) or None
    if (zk is None) == (brokers is None):
        raise LoaderConfigError(
            "give exactly one of the options zk (ZooKeeper connect string with chroot) or brokers (host:port,host:port)"
        )
    if zk is not None:
        try:
            validate_zk_connect(zk)
        except ConfigError as exc:
            raise LoaderConfigError(f"option zk: {exc}") from None
    topic_text = options.get("topics") or options.get("path") or ""
    topics = tuple(t.strip() for t in topic_text.split(",") if t.strip())
    if not topics:
        raise LoaderConfigError("option topics is required: a comma-separated list of topics")
    for topic in topics:
        check_topic_name(topic, "option topics")
    decode_text = options.get("decodeagentrecords", "false").strip()
    if decode_text.lower() in ("true", "false"):
        decode = frozenset(topics) if decode_text.lower() == "true" else frozenset()
        agent_columns = decode_text.lower() == "true"
    else:
        decode = frozenset(t.strip() for t in decode_text.split(",") if t.strip())
        stray = sorted(decode - set(topics))
        if stray:
            raise LoaderConfigError(f"option decodeAgentRecords names {stray[0]!r}, which is not in the option topics")
        agent_columns = True
    gap = options.get("onretentiongap", "fail").lower()
    if gap not in ("fail", "skip"):
        raise LoaderConfigError(f"option onRetentionGap must be 'fail' or 'skip', got {gap!r}")
    chunks = None
    if "chunks" in options:
        try:
            chunks = tuple(Chunk.from_json(c) for c in json.loads(options["chunks"]))
        except (ValueError, TypeError) as exc:
            raise LoaderConfigError(f"option chunks is not a list of [topic, partition, start, end]: {exc}") from None
    return SourceOptions(
        endpoint=Endpoint(zk, brokers, _parse_tls(options), _parse_sasl(options), options.get("listener") or None),
        topics=topics,
        starting=parse_offset_spec(options.get("startingoffsets"), "startingOffsets", EARLIEST),
        ending=parse_offset_spec(options.get("endingoffsets"), "endingOffsets", LATEST),
        max_bytes_per_partition=_positive(options, "maxbytesperpartition", "maxBytesPerPartition", 64 * MiB),
        fetch_bytes=_positive(options, "fetchbytes", "fetchBytes", 8 * MiB),
        decode=decode,
        agent_columns=agent_columns,
        skip_gaps=gap == "skip",
        chunks=chunks,
    )


def _positive(options: dict[str, str], key: str, name: str, default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise LoaderConfigError(f"option {name} must be a positive number of bytes, got {text!r}")
    return value
