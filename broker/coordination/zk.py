"""Connecting to ZooKeeper with kazoo, and the znode paths of the registries.

Each cluster lives under its own chroot (``host:port/logferry/live``); kazoo does not
create a chroot, so :func:`connect` does. Paths below are relative to the chroot and
follow the paper's layout (see DESIGN.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from broker.common.errors import ZooKeeperError

log = logging.getLogger("logferry.zk")

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
PREFERRED_ELECTION = "/admin/preferred_replica_election"


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


def connect(connect_string: str, timeout: float = 15.0, session_timeout: float = 10.0) -> KazooClient:
    """Start a kazoo client on ``connect_string``, creating its chroot if missing.

    Raises ZooKeeperError with the address when ZooKeeper cannot be reached in time.
    """
    hosts, chroot = split_connect(connect_string)
    if chroot:
        bootstrap = KazooClient(hosts=hosts, timeout=timeout)
        _start(bootstrap, hosts, timeout)
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    # Reconnect with a backoff capped at one second (kazoo's default grows to an hour):
    # after ZooKeeper comes back, a client must reattach before its session expires.
    retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, max_jitter=0.3)
    client = KazooClient(hosts=connect_string, timeout=session_timeout, connection_retry=retry)
    _record_granted_session_timeout(client)
    _start(client, connect_string, timeout)
    for path in (CONSUMERS, BROKER_TOPICS, BROKER_IDS):
        client.ensure_path(path)
    return client


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
        try:
            setattr(client, _GRANTED, float(result[0]) * 1.5 / 1000.0)
        except (TypeError, ValueError, IndexError):
            pass
        return result
    setattr(handler, "_connect", connect_and_record)


def _start(client: KazooClient, where: str, timeout: float) -> None:
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException, OSError) as exc:
        client.close()
        raise ZooKeeperError(
            f"cannot reach ZooKeeper at {where} within {timeout:.0f}s ({exc}); "
            "is it running? (`logferry zk start` starts a local one)"
        ) from None


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
    "BROKER_IDS", "BROKER_TOPICS", "CONSUMERS", "CONTROLLER", "CONTROLLER_EPOCH",
    "NodeExistsError", "PREFERRED_ELECTION", "broker_path", "close", "connect", "decode",
    "encode", "encode_topic", "granted_session_timeout", "partition_state_path",
    "read_assignment", "read_topic_config", "split_connect", "topic_path",
]
