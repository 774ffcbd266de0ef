"""The broker's TOML configuration, validated at start with errors that name the key.

Read and checked with :mod:`broker.common.config` (one error format and path rule for
every component: relative ``log_dirs`` are relative to the config file's directory).
Keys follow the paper's and Kafka's names with underscores (``segment.bytes`` is
``[log] segment_bytes``) because a dot in a TOML key means a nested table. The full
reference with defaults is ``docs/configuration.md``; ``etc/live/broker-1.toml`` is a
working example.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from broker.common.config import (
    BOOL,
    INTEGER,
    NONEMPTY_STR,
    NONEMPTY_STR_LIST,
    NONNEG_INT,
    NONNEG_NUMBER,
    PORT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    TABLE,
    Check,
    Validator,
    fields,
    one_of,
    read,
)
from broker.common.sasl import SASL_FIELDS, SaslCredentials, sasl_from_table
from broker.common.tls import TLS_FIELDS, TlsConfig, tls_from_table
from broker.common.topic_config import VISIBILITY_CHOICES as VISIBILITIES
from broker.common.zk_security import ZOOKEEPER_FIELDS, with_security, zookeeper_from_table
from broker.server.listeners import (
    DEFAULT_LISTENER,
    KAFKA,
    ListenerConfig,
    check_inter_broker,
    default_listener,
    listeners_from_list,
)
from broker.server.security.authentication import AUTH_FIELDS, AuthConfig, auth_from_table, auth_warnings
from broker.server.security.authorizer import AUTHORIZER_FIELDS, AuthorizerConfig, authorizer_from_table
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
    """The largest request frame read (Kafka's ``socket.request.max.bytes``): a larger
    one closes the connection, on either listener, since the stream cannot be read on."""
    max_message_bytes: int = 1024 * 1024 + 12
    """The largest record batch a Kafka producer may append (Kafka's
    ``message.max.bytes``, same default): a larger one is refused with
    MESSAGE_TOO_LARGE for its partition and the connection stays open."""
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    """A transactional id with no transaction and no request for this long is forgotten
    (Kafka's ``transactional.id.expiration.ms``, same default): its ZooKeeper nodes go,
    and a producer that comes back with it starts over with a new producer id."""
    transaction_state_partitions: int = 8
    """Partitions of ``__transaction_state`` when a broker creates it (Kafka's
    ``transaction.state.log.num.partitions``); fixed from then on."""
    transaction_state_replication_factor: int = 3
    """Its replication factor, capped at the live brokers (Kafka's
    ``transaction.state.log.replication.factor``)."""
    transaction_state_min_insync_replicas: int = 2
    """Its ``min_insync_replicas``, capped at the replication factor (Kafka's
    ``transaction.state.log.min.isr``)."""
    transaction_state_snapshot_bytes: int = 8 * 1024 * 1024
    """A partition of ``__transaction_state`` longer than this (and than twice its last
    snapshot) gets a snapshot of its ids' states, and its log start moves there."""
    max_queued_request_bytes: int = 100 * 1024 * 1024
    max_unsent_bytes_per_connection: int = 8 * 1024 * 1024
    incomplete_request_timeout_ms: int = 30_000
    max_connections: int = 4096
    num_partitions: int = 4
    auto_create_topics: bool = True
    metrics_port: int = 0
    zk_session_timeout_s: float = 10.0
    zk_connect_timeout_s: float = 5.0
    retention_check_ms: int = 60_000
    shutdown_timeout_s: float = 10.0
    controlled_shutdown: bool = True
    """On a stop, first have the controller move this broker's leadership elsewhere."""
    controlled_shutdown_timeout_s: float = 10.0
    """How long a stop waits for that before it goes on regardless."""
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
    tls: TlsConfig | None = None
    """The ``[tls]`` table: TLS on the data port and to leaders (None: plaintext)."""
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    """The ``[authorizer]`` table: ACLs enforced or not, and the superusers."""
    auth: AuthConfig | None = None
    """The ``[auth]`` table: SASL offered, authentication required (None: neither)."""
    sasl: SaslCredentials | None = None
    """The ``[sasl]`` table: this broker's credentials toward leaders (followers' fetches)."""
    kafka_listen: tuple[str, int] | None = None
    """The ``[kafka] listen`` address of the Kafka-protocol listener (docs/kafka.md);
    None: no Kafka listener. A bare port listens on ``host``."""
    metrics_tls: TlsConfig | None = None
    """The ``[metrics.tls]`` table: serve the metrics endpoint over HTTPS (None: HTTP)."""
    listeners: tuple[ListenerConfig, ...] = ()
    """Every listener (:mod:`broker.server.listeners`); a config without
    ``[[listeners]]`` gets ``default`` (and ``kafka``) from the keys above. Empty only
    in a config built by hand, which :func:`effective_listeners` completes the same way."""
    inter_broker_listener: str = DEFAULT_LISTENER
    """The listener followers fetch from leaders on."""


_SECONDS_OR_OFF = Check(NONNEG_NUMBER.test, "a number of seconds >= 0 (0 turns it off)")

BROKER_FIELDS = fields(
    ("id", "log_dirs", "zk_connect"),
    id=NONNEG_INT,
    host=NONEMPTY_STR,
    port=PORT,
    datacenter=NONEMPTY_STR,
    log_dirs=Check(NONEMPTY_STR_LIST.test, "a non-empty list of directory paths"),
    zk_connect=NONEMPTY_STR,
    zk_session_timeout_s=POSITIVE_NUMBER,
    zk_connect_timeout_s=POSITIVE_NUMBER,
    max_request_bytes=POSITIVE_INT,
    max_message_bytes=POSITIVE_INT,
    transactional_id_expiration_ms=POSITIVE_INT,
    transaction_state_partitions=POSITIVE_INT,
    transaction_state_replication_factor=POSITIVE_INT,
    transaction_state_min_insync_replicas=POSITIVE_INT,
    transaction_state_snapshot_bytes=POSITIVE_INT,
    max_queued_request_bytes=POSITIVE_INT,
    max_unsent_bytes_per_connection=POSITIVE_INT,
    incomplete_request_timeout_ms=POSITIVE_INT,
    max_connections=POSITIVE_INT,
    num_partitions=POSITIVE_INT,
    auto_create_topics=BOOL,
    metrics_port=PORT,
    retention_check_ms=POSITIVE_INT,
    shutdown_timeout_s=POSITIVE_NUMBER,
    controlled_shutdown=BOOL,
    controlled_shutdown_timeout_s=POSITIVE_NUMBER,
    rack=NONEMPTY_STR,
    default_replication_factor=POSITIVE_INT,
    min_insync_replicas=POSITIVE_INT,
    replica_lag_time_max_ms=POSITIVE_INT,
    replica_fetch_wait_max_ms=POSITIVE_INT,
    replica_fetch_max_bytes=POSITIVE_INT,
    acks_all_timeout_ms=POSITIVE_INT,
    unclean_leader_election=BOOL,
    leader_rebalance_interval_s=_SECONDS_OR_OFF,
    inter_broker_listener=NONEMPTY_STR,
)
"""The ``[broker]`` table (docs/configuration.md lists every key with its default)."""

LOG_FIELDS = fields(
    segment_bytes=POSITIVE_INT,
    segment_ms=POSITIVE_INT,
    group_commit=BOOL,
    flush_messages=POSITIVE_INT,
    flush_ms=POSITIVE_INT,
    visibility=one_of(*VISIBILITIES),
    retention_hours=POSITIVE_NUMBER,
    retention_ms=POSITIVE_INT,
    retention_bytes=Check(lambda v: INTEGER.test(v) and v >= -1, "an integer >= 0, or -1 for unlimited"),
)
"""The ``[log]`` table: :class:`~broker.storage.config.LogConfig` plus ``retention_hours``."""

KAFKA_FIELDS = fields(
    listen=Check(
        lambda v: (
            (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535)
            or (isinstance(v, str) and _parse_listen(v, "") is not None)
        ),
        'a port (0-65535) or "host:port"',
    ),
)
"""The ``[kafka]`` table: the Kafka-protocol listener (docs/kafka.md)."""

METRICS_FIELDS = fields(tls=TABLE)
"""The ``[metrics]`` table: ``[metrics.tls]`` (the ``[tls]`` keys) serves HTTPS."""

SECTIONS = {
    "broker": BROKER_FIELDS,
    "log": LOG_FIELDS,
    "tls": TLS_FIELDS,
    "auth": AUTH_FIELDS,
    "metrics": METRICS_FIELDS,
    "sasl": SASL_FIELDS,
    "authorizer": AUTHORIZER_FIELDS,
    "zookeeper": ZOOKEEPER_FIELDS,
    "kafka": KAFKA_FIELDS,
}


def _parse_listen(value: str | int, host: str) -> tuple[str, int] | None:
    """``"host:port"`` or a port as ``(host, port)``; None if it is neither."""
    if isinstance(value, int):
        return host, value
    listen_host, sep, port = value.rpartition(":")
    if not sep or not listen_host or not port.isdigit() or int(port) > 65535:
        return None
    return listen_host.strip("[]"), int(port)


def load_broker_config(path: str | Path) -> BrokerConfig:
    """Read and validate a broker config file; raise ConfigError naming the file and key."""
    data, validator = read(path)
    return _build(data, validator)


def broker_config_from_dict(data: dict[str, Any], source: str = "") -> BrokerConfig:
    """Validate a parsed config (a dict shaped like the TOML file).

    ``source`` names where it came from in errors; relative paths are taken from the
    working directory.
    """
    return _build(data, Validator(file=source))


def _build(data: dict[str, Any], validator: Validator) -> BrokerConfig:
    data = dict(data)
    listener_tables = data.pop("listeners", None)
    tables = validator.sections(data, SECTIONS)
    if listener_tables is not None:
        return _build_with_listeners(data, tables, listener_tables, validator)
    broker, log = tables["broker"], tables["log"]
    tls = tls_from_table(validator, tables["tls"], "tls", server=True)
    auth = auth_from_table(validator, tables["auth"], tls is not None, tls.client_auth if tls else "none")
    sasl = sasl_from_table(validator, tables["sasl"], "sasl")
    if "retention_hours" in log and "retention_ms" in log:
        validator.fail("log.retention_hours", "set log.retention_hours or log.retention_ms, not both")
    log_kwargs = {k: v for k, v in log.items() if k != "retention_hours"}
    if "retention_hours" in log:
        log_kwargs["retention_ms"] = int(log["retention_hours"] * 3600 * 1000)
    dirs = tuple(validator.path(p) for p in broker.pop("log_dirs"))
    broker_id = broker.pop("id")
    zk_connect = broker.pop("zk_connect")
    _check_zk_connect(zk_connect, validator)
    # [zookeeper]: the login and TLS travel with the connect string (a ZkTarget).
    zk_connect = with_security(zk_connect, zookeeper_from_table(validator, tables["zookeeper"]))
    listen = tables["kafka"].get("listen")
    kafka_listen = None if listen is None else _parse_listen(listen, broker.get("host", "127.0.0.1"))
    if kafka_listen is not None and auth is not None and auth.required:
        validator.fail(
            "kafka.listen",
            "[kafka] listen is a plaintext listener with no "
            "SASL, which would bypass auth.required: declare [[listeners]] instead, "
            'the Kafka one with protocol = "kafka" and its own tls and auth '
            "tables (docs/kafka.md)",
        )
    if broker.get("inter_broker_listener", DEFAULT_LISTENER) != DEFAULT_LISTENER:
        validator.fail(
            "broker.inter_broker_listener",
            f"without [[listeners]] the only listener is {DEFAULT_LISTENER!r}: define [[listeners]] or remove it",
        )
    config = BrokerConfig(
        broker_id=broker_id,
        zk_connect=zk_connect,
        log_dirs=dirs,
        log=LogConfig(**log_kwargs),
        tls=tls,
        auth=auth,
        sasl=sasl,
        authorizer=authorizer_from_table(validator, tables["authorizer"]),
        kafka_listen=kafka_listen,
        metrics_tls=metrics_tls_from(validator, tables["metrics"]),
        **broker,
    )
    return replace(config, listeners=effective_listeners(config))


def _build_with_listeners(
    data: dict[str, Any], tables: dict[str, dict[str, Any]], listener_tables: Any, validator: Validator
) -> BrokerConfig:
    """A config with ``[[listeners]]``: the listeners carry the addresses and security,
    so the older single-listener keys are refused rather than half-applied."""
    for section in ("tls", "auth", "kafka"):
        if section in data:
            validator.fail(
                section,
                f"with [[listeners]], put {section} settings in the listeners (listeners.{section}) instead"
                if section != "kafka"
                else 'with [[listeners]], add a listener with protocol = "kafka" instead of [kafka]',
            )
    for key in ("host", "port"):
        if key in tables["broker"]:
            validator.fail(f"broker.{key}", f"with [[listeners]], each listener has its own {key}: remove broker.{key}")
    listeners = listeners_from_list(validator, listener_tables)
    inter = check_inter_broker(validator, listeners, tables["broker"].pop("inter_broker_listener", None))
    main = default_listener(listeners)
    inter_auth = next(lst.auth for lst in listeners if lst.name == inter)
    if "username" in tables["sasl"] and inter_auth is None:
        validator.fail(
            "sasl",
            f"the inter-broker listener {inter!r} offers no SASL (it has "
            "no listeners.auth): remove [sasl] or name a listener with auth in "
            "broker.inter_broker_listener",
        )
    kafka = next((listener for listener in listeners if listener.protocol == KAFKA), None)
    # The default listener also fills the single-listener fields, so code that reads
    # config.host/port/tls/auth (metrics' host, say) sees the default listener.
    broker = {k: v for k, v in data.get("broker", {}).items() if k != "inter_broker_listener"}
    plain = {**data, "broker": {**broker, "host": main.host, "port": main.port}}
    config = _build(plain, validator)
    return replace(
        config,
        tls=main.tls,
        auth=main.auth,
        kafka_listen=(kafka.host, kafka.port) if kafka else None,
        listeners=listeners,
        inter_broker_listener=inter,
    )


def metrics_tls_from(validator: Validator, metrics: dict[str, Any]) -> TlsConfig | None:
    """``[metrics.tls]`` as a server's TLS settings (None: plain HTTP)."""
    table = validator.check(metrics.get("tls", {}), TLS_FIELDS, "metrics.tls")
    return tls_from_table(validator, table, "metrics.tls", server=True)


def effective_listeners(config: BrokerConfig) -> tuple[ListenerConfig, ...]:
    """``config.listeners``, or for a config without them the listeners its
    single-listener keys describe (``default``, and ``kafka`` for ``[kafka] listen``)."""
    if config.listeners:
        return config.listeners
    listeners = [ListenerConfig(DEFAULT_LISTENER, config.host, config.port, tls=config.tls, auth=config.auth)]
    if config.kafka_listen is not None:
        listeners.append(ListenerConfig(KAFKA, *config.kafka_listen, protocol=KAFKA))
    return tuple(listeners)


def _check_zk_connect(value: str, validator: Validator) -> None:
    validator.zk_connect("broker.zk_connect", value)


def config_warnings(config: BrokerConfig) -> list[str]:
    """Settings that are valid but unwise, one sentence each; the broker logs them at start.

    Pure, so a test can check that the shipped example configs draw none.
    """
    warnings = []
    kafka = next((lst for lst in effective_listeners(config) if lst.protocol == KAFKA), None)
    if config.kafka_listen is not None and config.tls is not None and kafka is not None and kafka.tls is None:
        warnings.append(
            f"[kafka] listen {config.kafka_listen[0]}:{config.kafka_listen[1]} is plaintext "
            "while [tls] protects the native port: Kafka clients' data crosses the network "
            "in clear (docs/kafka.md)"
        )
    if config.acks_all_timeout_ms <= config.replica_lag_time_max_ms:
        warnings.append(
            f"acks_all_timeout_ms ({config.acks_all_timeout_ms}) is not longer than "
            f"replica_lag_time_max_ms ({config.replica_lag_time_max_ms}): acks=all produces "
            "may time out while a dead follower is still in the ISR, and the producer's "
            "retries may store them twice"
        )
    if config.max_queued_request_bytes < config.max_request_bytes:
        warnings.append(
            f"max_queued_request_bytes ({config.max_queued_request_bytes}) is smaller than "
            f"max_request_bytes ({config.max_request_bytes}): a request larger than the "
            "budget is read only while no other request is"
        )
    warnings += auth_warnings(
        config.auth, config.tls is not None, config.tls.client_auth if config.tls else "none", config.sasl is not None
    )
    return warnings
