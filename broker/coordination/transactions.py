"""Kafka transactions' coordinator state in ZooKeeper.

Layout, under the cluster's chroot (ids are URL-quoted: a transactional id or group
may hold ``/`` or other characters a znode name may not)::

    /kafka_transactions/<transactional id>                      {producer_id, epoch, state, partitions, ...}
    /kafka_transactions/<transactional id>/offsets/<group>      {producer_id, epoch, offsets: [[topic, p, offset], ...]}

The first is the coordinator's state of the id (its JSON is
:meth:`broker.server.kafka.txn_state.TxnMetadata.to_json`), written with the znode
version read (:func:`write_state`), so two brokers that both believe they coordinate
the id (a coordinator move) never overwrite each other's change. The second holds the
offsets a transaction commits for a group (TxnOffsetCommit) until the transaction
ends: written into the group's offsets on commit, deleted on abort. Like the groups'
offsets, they are persistent: they survive any broker's kill -9.

Blocking (kazoo) calls: run them off the event loop. Kazoo errors become
:class:`~broker.common.errors.ZooKeeperError` naming the path.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.common.errors import ZooKeeperError

TRANSACTIONS = "/kafka_transactions"


class StaleStateError(ZooKeeperError):
    """The state changed in ZooKeeper since it was read (another broker coordinated the
    id meanwhile): read it again."""


def state_path(transactional_id: str) -> str:
    """The znode of a transactional id's state."""
    return f"{TRANSACTIONS}/{quote(transactional_id, safe='')}"


def _offsets_path(transactional_id: str, group: str | None = None) -> str:
    base = f"{state_path(transactional_id)}/offsets"
    return base if group is None else f"{base}/{quote(group, safe='')}"


def read_state(client: Any, transactional_id: str) -> tuple[bytes, int] | None:
    """``(value, znode version)`` of the id's state, None if it has none."""
    path = state_path(transactional_id)
    try:
        raw, stat = client.get(path)
    except NoNodeError:
        return None
    except KazooException as exc:
        raise ZooKeeperError(f"cannot read {path}: {exc!r}") from None
    return bytes(raw), int(stat.version)


def write_state(client: Any, transactional_id: str, value: bytes, version: int | None) -> int:
    """Write the id's state if it is still at ``version`` (None: create it); returns the
    new version. StaleStateError if another writer got there first."""
    path = state_path(transactional_id)
    try:
        if version is None:
            client.create(path, value, makepath=True)
            return 0
        return int(client.set(path, value, version=version).version)
    except (BadVersionError, NodeExistsError, NoNodeError):
        raise StaleStateError(f"{path} changed since it was read") from None
    except KazooException as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None


def list_ids(client: Any) -> list[str]:
    """Every transactional id with a state."""
    try:
        return [unquote(name) for name in client.get_children(TRANSACTIONS)]
    except NoNodeError:
        return []
    except KazooException as exc:
        raise ZooKeeperError(f"cannot list {TRANSACTIONS}: {exc!r}") from None


def write_pending_offsets(
    client: Any, transactional_id: str, group: str, producer_id: int, epoch: int, offsets: list[tuple[str, int, int]]
) -> None:
    """Add ``(topic, partition, message offset)`` to the offsets the id's transaction
    commits for ``group`` (a later one for the same partition replaces the earlier)."""
    path = _offsets_path(transactional_id, group)
    try:
        try:
            raw, _ = client.get(path)
            kept = {(t, p): o for t, p, o in json.loads(raw)["offsets"]}
        except NoNodeError:
            kept = {}
        kept.update({(t, p): o for t, p, o in offsets})
        value = json.dumps(
            {"producer_id": producer_id, "epoch": epoch, "offsets": [[t, p, o] for (t, p), o in sorted(kept.items())]}
        ).encode()
        if client.exists(path) is None:
            try:
                client.create(path, value, makepath=True)
                return
            except NodeExistsError:
                pass
        client.set(path, value)
    except (KazooException, KeyError, TypeError, ValueError) as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None


def read_pending_offsets(client: Any, transactional_id: str) -> dict[str, list[tuple[str, int, int]]]:
    """Group -> the ``(topic, partition, offset)`` its transaction commits."""
    base = _offsets_path(transactional_id)
    out: dict[str, list[tuple[str, int, int]]] = {}
    try:
        for name in client.get_children(base):
            raw, _ = client.get(f"{base}/{name}")
            out[unquote(name)] = [(str(t), int(p), int(o)) for t, p, o in json.loads(raw)["offsets"]]
    except NoNodeError:
        return out
    except (KazooException, KeyError, TypeError, ValueError) as exc:
        raise ZooKeeperError(f"cannot read {base}: {exc!r}") from None
    return out


def delete_pending_offsets(client: Any, transactional_id: str) -> None:
    """Forget the offsets of the id's transaction (it ended)."""
    try:
        client.delete(_offsets_path(transactional_id), recursive=True)
    except NoNodeError:
        return
    except KazooException as exc:
        raise ZooKeeperError(f"cannot delete {_offsets_path(transactional_id)}: {exc!r}") from None


__all__ = [
    "TRANSACTIONS",
    "StaleStateError",
    "delete_pending_offsets",
    "list_ids",
    "read_pending_offsets",
    "read_state",
    "state_path",
    "write_pending_offsets",
    "write_state",
]
