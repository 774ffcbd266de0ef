"""Kafka transactions' coordinator state in ZooKeeper.

Layout, under the cluster's chroot (ids are URL-quoted: a transactional id or group
may hold ``/`` or other characters a znode name may not)::

    /kafka_transactions/<transactional id>                      {producer_id, epoch, state, partitions, ...}
    /kafka_transactions/<transactional id>/offsets/<group>      {producer_id, epoch, offsets: [[topic, p, offset], ...]}
    /kafka_transactions/<transactional id>/ends                 (empty: its version counts the transactions ended)
    /kafka_transaction_groups/<group>/<transactional id>        (empty: the group has offsets pending there)

The coordinator's state of an id lives in the internal topic ``__transaction_state``
(:mod:`broker.server.kafka.txn_store`). The first znode is what the group coordinators
need of it: a mirror (its JSON is
:meth:`broker.server.kafka.txn_state.TxnMetadata.to_json` with ``"mirror": true``)
written by the id's coordinator when a transaction adds a group (AddOffsetsToTxn,
:func:`write_mirror`) and when such a transaction ends (:func:`mark_end`), which
TxnOffsetCommit reads. Before that topic, the coordinators kept the whole state there
(no ``mirror`` key), written with the znode version read (:func:`write_state`): a
coordinator takes such a state over into the topic once. The second holds the
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


def as_mirror(value: bytes) -> bytes:
    """A state's JSON marked as a mirror of the state log's (module docstring)."""
    data = json.loads(value)
    data["mirror"] = True
    return json.dumps(data, separators=(",", ":")).encode()


def write_mirror(client: Any, transactional_id: str, value: bytes) -> None:
    """Set the id's mirror (``value``: :func:`as_mirror`'s), whatever was there."""
    path = state_path(transactional_id)
    try:
        try:
            client.set(path, value)
        except NoNodeError:
            client.create(path, value, makepath=True)
    except KazooException as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None


def _first_failure(results: list[Any]) -> Exception | None:
    """The first operation of a committed multi-op that failed (kazoo returns the
    exception in that operation's place and applies none of them), or None."""
    return next((r for r in results if isinstance(r, Exception)), None)


def mark_end(client: Any, transactional_id: str, mirror: bytes | None = None) -> None:
    """A transaction of the id is ending: no offsets may be added to it from now on
    (:func:`write_pending_offsets` of a caller that read the count before fails). With
    ``mirror``, the id's mirror (the ended state) is set in the same multi-op."""
    path = _ends_path(transactional_id)
    try:
        client.ensure_path(path)
        if mirror is None:
            client.set(path, b"")
            return
        multi = client.transaction()
        multi.set_data(path, b"")
        if client.exists(state_path(transactional_id)) is None:
            multi.create(state_path(transactional_id), mirror)
        else:
            multi.set_data(state_path(transactional_id), mirror)
        results = multi.commit()
    except KazooException as exc:
        raise ZooKeeperError(f"cannot write {path}: {exc!r}") from None
    if (failed := _first_failure(results)) is not None:
        raise ZooKeeperError(f"cannot write {path} and the state beside it: {failed!r}")


def delete_mirror(client: Any, transactional_id: str) -> None:
    """Delete the id's znodes (a forgotten id), unless offsets wait under it (then
    StaleStateError: the id is not idle). Nothing there: nothing done."""
    path = state_path(transactional_id)
    try:
        if client.exists(path) is None:
            return
        multi = client.transaction()
        if client.exists(_ends_path(transactional_id)) is not None:
            multi.delete(_ends_path(transactional_id))
        multi.delete(path)
        results = multi.commit()
    except KazooException as exc:
        raise ZooKeeperError(f"cannot delete {path}: {exc!r}") from None
    if (failed := _first_failure(results)) is not None:
        raise StaleStateError(f"{path} has children besides its ends count: {failed!r}")


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
    if (failed := _first_failure(results)) is not None:
        raise StaleStateError(f"a transaction of {transactional_id!r} ended, or {path} changed, meanwhile: {failed!r}")


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
    "as_mirror",
    "delete_mirror",
    "delete_pending_offsets",
    "end_count",
    "list_ids",
    "mark_end",
    "pending_for_group",
    "read_pending_offsets",
    "read_state",
    "state_path",
    "write_mirror",
    "write_pending_offsets",
    "write_state",
]
