"""Kafka transactions' coordinator state in ZooKeeper.

Layout, under the cluster's chroot (ids are URL-quoted: a transactional id or group
may hold ``/`` or other characters a znode name may not)::

    /kafka_transactions/<transactional id>                      {producer_id, epoch, state, partitions, ...}
    /kafka_transactions/<transactional id>/offsets/<group>      {producer_id, epoch, offsets: [[topic, p, offset], ...]}
    /kafka_transactions/<transactional id>/ends                 (empty: its version counts the transactions ended)
    /kafka_transaction_groups/<group>/<transactional id>        (empty: the group has offsets pending there)

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

import contextlib
import json
from typing import Any
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.common.errors import ZooKeeperError

TRANSACTIONS = "/kafka_transactions"
TXN_GROUPS = "/kafka_transaction_groups"
"""``/kafka_transaction_groups/<group>/<transactional id>``: empty nodes marking the
groups whose offsets an unfinished transaction holds."""


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


def delete_state(client: Any, transactional_id: str, version: int) -> None:
    """Forget an expired id: its state (if still at ``version``) and its ``ends`` node,
    in one multi-op. StaleStateError if the state changed since it was read (a producer
    came back meanwhile), or if offsets wait under it (the id is not idle)."""
    path = state_path(transactional_id)
    try:
        multi = client.transaction()
        if client.exists(_ends_path(transactional_id)) is not None:
            multi.delete(_ends_path(transactional_id))
        multi.delete(path, version=version)
        results = multi.commit()
    except KazooException as exc:
        raise ZooKeeperError(f"cannot delete {path}: {exc!r}") from None
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise StaleStateError(f"{path} changed since it was read, or has children: {failed[0]!r}")


def list_ids(client: Any) -> list[str]:
    """Every transactional id with a state."""
    try:
        return [unquote(name) for name in client.get_children(TRANSACTIONS)]
    except NoNodeError:
        return []
    except KazooException as exc:
        raise ZooKeeperError(f"cannot list {TRANSACTIONS}: {exc!r}") from None


def _group_index(group: str, transactional_id: str | None = None) -> str:
    base = f"{TXN_GROUPS}/{quote(group, safe='')}"
    return base if transactional_id is None else f"{base}/{quote(transactional_id, safe='')}"


def _ends_path(transactional_id: str) -> str:
    return f"{state_path(transactional_id)}/ends"


def end_count(client: Any, transactional_id: str) -> int:
    """How many transactions of the id ended (its ``ends`` node's version): read before
    the state, and given to :func:`write_pending_offsets`."""
    path = _ends_path(transactional_id)
    try:
        client.ensure_path(path)
        return int(client.exists(path).version)
    except (KazooException, AttributeError) as exc:
        raise ZooKeeperError(f"cannot read {path}: {exc!r}") from None


def mark_end(client: Any, transactional_id: str) -> None:
    """A transaction of the id is ending: no offsets may be added to it from now on
    (:func:`write_pending_offsets` of a caller that read the count before fails)."""
    path = _ends_path(transactional_id)
    try:
        client.ensure_path(path)
        client.set(path, b"")
    except KazooException as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None


def write_pending_offsets(
    client: Any,
    transactional_id: str,
    group: str,
    producer_id: int,
    epoch: int,
    offsets: list[tuple[str, int, int]],
    ends: int,
) -> None:
    """Add ``(topic, partition, message offset)`` to the offsets the id's transaction
    commits for ``group`` (a later one for the same partition replaces the earlier), in
    one ZooKeeper multi-op that also checks that no transaction of the id ended since
    the caller read :func:`end_count` (``ends``) and then saw its transaction Ongoing:
    an abort or end meanwhile makes it fail with StaleStateError, so no offsets of an
    ended transaction are left behind. The group is marked as having offsets pending
    (:func:`pending_for_group`)."""
    path, index = _offsets_path(transactional_id, group), _group_index(group, transactional_id)
    try:
        client.ensure_path(_offsets_path(transactional_id))
        client.ensure_path(_group_index(group))
        try:
            raw, stat = client.get(path)
            kept = {(t, p): o for t, p, o in json.loads(raw)["offsets"]}
        except NoNodeError:
            kept, stat = {}, None
        kept.update({(t, p): o for t, p, o in offsets})
        value = json.dumps(
            {"producer_id": producer_id, "epoch": epoch, "offsets": [[t, p, o] for (t, p), o in sorted(kept.items())]}
        ).encode()
        multi = client.transaction()
        multi.check(_ends_path(transactional_id), ends)
        if stat is None:
            multi.create(path, value)
        else:
            multi.set_data(path, value, version=stat.version)
        if client.exists(index) is None:
            multi.create(index, b"")
        results = multi.commit()
    except (KazooException, KeyError, TypeError, ValueError) as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise StaleStateError(
            f"a transaction of {transactional_id!r} ended, or {path} changed, meanwhile: {failed[0]!r}"
        )


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


def pending_for_group(client: Any, group: str) -> set[tuple[str, int]]:
    """The partitions of ``group`` with offsets in a transaction not ended yet: an
    OffsetFetch that asks for stable offsets gets UNSTABLE_OFFSET_COMMIT for them (the
    client asks again), as from Kafka."""
    out: set[tuple[str, int]] = set()
    try:
        for name in client.get_children(_group_index(group)):
            try:
                raw, _ = client.get(_offsets_path(unquote(name), group))
            except NoNodeError:  # its transaction is ending: the index goes next
                continue
            out.update((str(t), int(p)) for t, p, _ in json.loads(raw)["offsets"])
    except NoNodeError:
        return out
    except (KazooException, KeyError, TypeError, ValueError) as exc:
        raise ZooKeeperError(f"cannot read {_group_index(group)}: {exc!r}") from None
    return out


def delete_pending_offsets(client: Any, transactional_id: str) -> None:
    """Forget the offsets of the id's transaction (it ended), and their marks on the groups."""
    base = _offsets_path(transactional_id)
    try:
        for name in client.get_children(base):
            with contextlib.suppress(NoNodeError):
                client.delete(_group_index(unquote(name), transactional_id))
        client.delete(base, recursive=True)
    except NoNodeError:
        return
    except KazooException as exc:
        raise ZooKeeperError(f"cannot delete {base}: {exc!r}") from None


__all__ = [
    "TRANSACTIONS",
    "TXN_GROUPS",
    "StaleStateError",
    "delete_pending_offsets",
    "delete_state",
    "end_count",
    "list_ids",
    "mark_end",
    "pending_for_group",
    "read_pending_offsets",
    "read_state",
    "state_path",
    "write_pending_offsets",
    "write_state",
]
