"""Connecting to ZooKeeper with kazoo, and the znode paths of the registries.

Each cluster lives under its own chroot (``host:port/logferry/live``); kazoo does not
create a chroot, so :func:`connect` does for a broker, and checks that one exists for
a client (a mistyped chroot must not become an empty cluster). Every kazoo client of
logferry is made by :func:`connect`. Paths below are relative to the chroot and
follow the paper's layout (see DESIGN.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from broker.common.errors import NoClusterError, ZooKeeperError
from broker.common.zk_connect import parse_zk_connect
from broker.common.zk_security import ZkSecurity, security_of
from broker.coordination.zk_acl import CONSUMERS as _CONSUMERS
from broker.coordination.zk_acl import AclKazooClient, AclPolicy, is_open

log = logging.getLogger("logferry.zk")

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
"""Children: ephemeral ``<broker id>`` of brokers asking the controller to move their
leadership away before they stop (valid while made by the broker's own session)."""
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
"""The reassignment under way (at most one): targets, original replicas, throttle
(:mod:`broker.coordination.reassignment`); the controller deletes it when done."""


def controlled_shutdown_path(broker_id: int) -> str:
    """A stopping broker's request to have its partitions' leadership moved."""
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def broker_path(broker_id: int) -> str:
    """Ephemeral registration of a live broker: ``{host, port, datacenter, rack}``.

    The znode's creation zxid is the broker's session as partition states record it."""
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    """Persistent replica assignment of a topic: ``{partitions: {p: [ids]}, config}``."""
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    """Persistent state of one partition: ``{leader, leader_epoch, isr, leader_session}``."""
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def split_connect(connect: str) -> tuple[str, str]:
    """Split ``hosts/chroot`` into ``(hosts, "/chroot")`` (chroot may be empty)."""
    hosts, sep, chroot = connect.partition("/")
    return hosts, (sep + chroot) if chroot else ""


CONNECT_TIMEOUT_S = 5.0
"""How long :func:`connect` waits for ZooKeeper by default: a local or LAN server answers
in milliseconds, so a connect string that points nowhere fails within seconds."""


def connect(
    connect_string: str,
    *,
    create: bool,
    timeout: float = CONNECT_TIMEOUT_S,
    session_timeout: float = 10.0,
    security: ZkSecurity | None = None,
) -> KazooClient:
    """Start a kazoo client on ``connect_string`` (the one place that makes clients).

    ``create=True`` (a broker joining its cluster) creates the chroot and the registry
    paths if missing. ``create=False`` (clients: producers, consumers, admin tools)
    writes nothing and raises ZooKeeperError when no broker ever registered there,
    so a mistyped chroot is reported instead of being created as an empty cluster.

    The connect string is validated first (ConfigError naming the bad part). If
    ZooKeeper cannot be reached within ``timeout`` seconds, raises ZooKeeperError
    with the address; kazoo's retry warnings while connecting are not logged (that one
    error says it all), its warnings after a successful connect are.

    ``security`` (by default the one a :class:`~broker.common.zk_security.ZkTarget`
    carries): the digest identity the session logs in with and TLS to ZooKeeper. A
    session with an identity creates every znode with the ACL of
    :mod:`broker.coordination.zk_acl` for its path.
    """
    security = security if security is not None else security_of(connect_string)
    connect_string = str(connect_string)
    parsed = parse_zk_connect(connect_string)
    if parsed.chroot or not create:
        _check_cluster(parsed.hosts, parsed.chroot, connect_string, create, timeout, security)
    # Reconnect with a backoff capped at one second (kazoo's default grows to an hour):
    # after ZooKeeper comes back, a client must reattach before its session expires.
    retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, max_jitter=0.3)
    logger = _ConnectQuietLogger()
    client = _client(security, hosts=connect_string, timeout=session_timeout, connection_retry=retry, logger=logger)
    _record_granted_session_timeout(client)
    _start(client, logger, connect_string, timeout, security)
    if isinstance(client, AclKazooClient) and not create:
        _adopt_consumers_acl(client)
    if create:
        for path in (CONSUMERS, BROKER_TOPICS, BROKER_IDS):
            client.ensure_path(path)
        if isinstance(client, AclKazooClient):
            _warn_if_open(client, connect_string)
    return client


def _warn_if_open(client: AclKazooClient, where: str) -> None:
    """A broker with a login on a cluster whose znodes were made without: say what to run."""
    try:
        open_paths = [p for p in ("/", CONSUMERS, BROKER_TOPICS, BROKER_IDS) if is_open(client.get_acls(p)[0])]
    except KazooException:
        return
    if open_paths:
        log.warning(
            "ZooKeeper znodes %s at %s are writable by anyone (made before this "
            "cluster had ZooKeeper logins): run `logferry zk secure` "
            "(docs/security.md, 'ZooKeeper')",
            ", ".join(open_paths),
            where,
        )


def _client(security: ZkSecurity | None, **kwargs: Any) -> KazooClient:
    """A kazoo client with ``security``'s login and TLS (a plain one without)."""
    if security is None:
        return KazooClient(**kwargs)
    if security.tls is not None:
        tls = security.tls
        kwargs.update(
            use_ssl=True,
            verify_certs=True,
            check_hostname=tls.verify_hostname,
            ca=str(tls.ca_file) if tls.ca_file else None,
            certfile=str(tls.cert_file) if tls.cert_file else None,
            keyfile=str(tls.key_file) if tls.key_file else None,
        )
    if not security.authenticated:
        return KazooClient(**kwargs)
    kwargs["auth_data"] = [("digest", f"{security.user}:{security.password}")]
    owner = security.digest_id
    assert owner is not None
    return AclKazooClient(acl_policy=AclPolicy(owner, security.consumer_ids), **kwargs)


def _adopt_consumers_acl(client: AclKazooClient) -> None:
    """A client copies ``/consumers``' ACL for what it creates below it (see zk_acl)."""
    try:
        acl, _ = client.get_acls(_CONSUMERS)
    except KazooException:
        return  # not readable to this identity: its creates there will be refused anyway
    if is_open(acl) or any(a.id.scheme == "digest" and a.id.id.endswith(":x") for a in acl):
        # a cluster not secured yet (`logferry zk secure`), or hashes ZooKeeper masked
        # for a reader without ADMIN there: keep to the policy
        return
    policy = client.acl_policy
    client.acl_policy = AclPolicy(policy.owner, policy.consumer_ids, tuple(acl))


def _check_cluster(
    hosts: str, chroot: str, connect_string: str, create: bool, timeout: float, security: ZkSecurity | None = None
) -> None:
    """Create the chroot (``create``), or make sure a cluster lives there (not ``create``).

    kazoo neither creates a chroot nor tells a missing one from an empty one, so a
    short session on the bare hosts looks first.
    """
    logger = _ConnectQuietLogger()
    bootstrap = _client(security, hosts=hosts, timeout=timeout, logger=logger)
    _start(bootstrap, logger, connect_string, timeout, security)
    try:
        if create and isinstance(bootstrap, AclKazooClient):
            # The chroot (and any parent it needs) is public: clients read it.
            bootstrap.ensure_path(chroot, acl=bootstrap.acl_policy.acls_for("/"))
        elif create:
            bootstrap.ensure_path(chroot)
        elif bootstrap.exists(chroot + BROKER_IDS) is None:
            raise NoClusterError(
                f"no logferry cluster at {connect_string} (no broker ever registered under "
                f"{chroot or '/'}; check the chroot{_clusters_nearby(bootstrap, chroot)})"
            )
    except KazooException as exc:
        raise ZooKeeperError(f"ZooKeeper at {hosts} failed while looking up {chroot or '/'}: {exc!r}") from None
    finally:
        close(bootstrap)


_NEARBY_LIMIT = 100
"""Znodes looked at for :func:`_clusters_nearby` (it runs only on the error path)."""


def _clusters_nearby(client: KazooClient, chroot: str) -> str:
    """``; clusters nearby: /logferry/live`` for a message about a mistyped chroot, or "".

    Looks at the chroot's children and siblings: a connect string that stops one level
    short, or a typo in the last segment.
    """
    found: list[str] = []
    for base in dict.fromkeys((chroot or "/", chroot.rpartition("/")[0] or "/")):
        prefix = base.rstrip("/")
        try:
            children = sorted(client.get_children(base))[:_NEARBY_LIMIT]
            found += [f"{prefix}/{c}" for c in children if client.exists(f"{prefix}/{c}{BROKER_IDS}") is not None]
        except KazooException:
            continue
    return f"; clusters nearby: {', '.join(found)}" if found else ""


class _ConnectQuietLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's own logger, with records below ERROR dropped until the first connect.

    While a client tries to reach a server that is not there, kazoo logs a warning per
    attempt ("Connection dropped", "Cannot resolve"); :func:`_start` turns the outcome
    into one error instead. Once connected, kazoo's warnings (a dropped connection, an
    expired session) are logged as usual: operators need those.
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.connecting = True

    def isEnabledFor(self, level: int) -> bool:
        if self.connecting and level < logging.ERROR:
            return False
        return bool(self.logger.isEnabledFor(level))

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return msg, kwargs


def granted_session_timeout(client: KazooClient) -> float | None:
    """The session timeout (s) the server granted at the last connect; None if unknown.

    The server clamps what a client asks for to its ``minSessionTimeout`` ..
    ``maxSessionTimeout`` range, and kazoo keeps the answer to itself. Brokers need it:
    a leader's write lease must end before the server can expire its session.
    """
    return getattr(client, _GRANTED, None)


_GRANTED = "_logferry_granted_session_timeout"


def _record_granted_session_timeout(client: KazooClient) -> None:
    """Remember the negotiated session timeout of each connect on the client.

    kazoo 2.x computes it in its connection handler's ``_connect`` (which returns the
    read timeout, two thirds of it, in ms) and keeps it in a local variable, so the
    handler's method is wrapped. Should a kazoo release change that, nothing is
    recorded and callers fall back to the timeout they asked for.
    """
    handler = getattr(client, "_connection", None)
    original = getattr(handler, "_connect", None)
    if original is None:
        return

    def connect_and_record(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        with contextlib.suppress(TypeError, ValueError, IndexError):
            setattr(client, _GRANTED, float(result[0]) * 1.5 / 1000.0)
        return result

    setattr(handler, "_connect", connect_and_record)  # noqa: B010 - handler is `Any | None` to mypy


def _start(
    client: KazooClient, logger: _ConnectQuietLogger, where: str, timeout: float, security: ZkSecurity | None = None
) -> None:
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException, OSError) as exc:
        close(client)
        tls = security is not None and security.tls is not None
        hint = (
            "; over TLS: is it ZooKeeper's secureClientPort, and does ca_file trust its certificate?"
            if tls
            else "; a TLS port (secureClientPort) needs [zookeeper.tls] or --zk-tls-ca"
        )
        raise ZooKeeperError(
            f"cannot reach ZooKeeper at {where} within {timeout:g}s ({exc}); check the "
            "host and port (is the server running? `logferry zk start` starts a local one)" + hint
        ) from None
    logger.connecting = False


def close(client: KazooClient) -> None:
    """Stop and close a kazoo client, ignoring errors from a dead connection."""
    try:
        client.stop()
        client.close()
    except Exception:  # pragma: no cover - best effort on shutdown
        log.debug("error while closing ZooKeeper client", exc_info=True)


def encode(data: dict[str, Any]) -> bytes:
    """Znode payloads are JSON, readable with zkCli for operators."""
    return json.dumps(data, sort_keys=True).encode()


def decode(raw: bytes | None) -> dict[str, Any]:
    """Parse a znode payload written by :func:`encode` (empty dict when blank)."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def encode_topic(replicas: dict[int, list[int]], config: dict[str, Any] | None = None) -> bytes:
    """A topic znode's payload: replica lists (the first is the preferred leader)."""
    data: dict[str, Any] = {"partitions": {str(p): list(r) for p, r in sorted(replicas.items())}}
    if config:
        data["config"] = dict(config)
    return encode(data)


def read_assignment(raw: bytes | None) -> dict[int, list[int]]:
    """Partition -> replica broker ids from a topic znode's payload.

    A topic written before replication existed holds one broker id per partition; it
    reads as a replica list of one.
    """
    parts = decode(raw).get("partitions", {})
    out: dict[int, list[int]] = {}
    for p, b in parts.items():
        try:
            out[int(p)] = [int(x) for x in b] if isinstance(b, list) else [int(b)]
        except (TypeError, ValueError):
            continue
    return out


def read_topic_config(raw: bytes | None) -> dict[str, Any]:
    """Per-topic settings stored beside the assignment (``min_insync_replicas``)."""
    config = decode(raw).get("config", {})
    return config if isinstance(config, dict) else {}


__all__ = [
    "BROKER_IDS",
    "BROKER_TOPICS",
    "CONNECT_TIMEOUT_S",
    "CONSUMERS",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "NodeExistsError",
    "PREFERRED_ELECTION",
    "REASSIGN_PARTITIONS",
    "CONTROLLED_SHUTDOWN",
    "controlled_shutdown_path",
    "broker_path",
    "close",
    "connect",
    "decode",
    "encode",
    "encode_topic",
    "granted_session_timeout",
    "partition_state_path",
    "read_assignment",
    "read_topic_config",
    "split_connect",
    "topic_path",
]


def registered_endpoints(data: Mapping[str, Any]) -> list[tuple[str, str, str, int, str]]:
    """A broker registration's listeners as (name, protocol, host, port, security).

    From its ``endpoints`` field; a registration without one (an older broker) gives
    what it has: its named listeners or ``default`` at ``host``/``port``, and its Kafka
    listener, with security unknown (``""``)."""
    raw = data.get("endpoints")
    out: list[tuple[str, str, str, int, str]] = []
    if isinstance(raw, list):
        for item in raw:
            try:
                out.append(
                    (
                        str(item["name"]),
                        str(item["protocol"]),
                        str(item["host"]),
                        int(item["port"]),
                        str(item.get("security", "")),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
        return out
    named = registered_listeners(data)
    if named:
        out += [(name, "logferry", host, port, "") for name, (host, port) in named.items()]
    elif data.get("host") and data.get("port"):
        out.append(("default", "logferry", str(data["host"]), int(data["port"]), ""))
    kafka = data.get("kafka")
    if isinstance(kafka, list) and len(kafka) == 2 and kafka[1]:
        out.append(("kafka", "kafka", str(kafka[0]), int(kafka[1]), ""))
    return out


def registered_listeners(data: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """A broker registration's ``listeners`` field as name -> (host, port) (tolerant
    of registrations from brokers that have none)."""
    raw = data.get("listeners")
    out: dict[str, tuple[str, int]] = {}
    if isinstance(raw, dict):
        for name, address in raw.items():
            if isinstance(address, list) and len(address) == 2:
                try:
                    out[str(name)] = (str(address[0]), int(address[1]))
                except (TypeError, ValueError):
                    continue
    return out
