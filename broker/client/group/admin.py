"""Consumer-group administration: list, describe, lag, seek and delete.

:class:`GroupAdmin` reads and writes a group's znodes (:mod:`.offsets`) and asks the
brokers for log ends; no member of the group is involved, so it works on a group whose
members are all down. ``logferry group`` and ``logferry mirror status`` are thin
printers over it, and every lag it reports comes from :func:`.lag.group_lag` (the one
formula, docs/groups.md "Lag").

``seek`` and ``delete`` refuse while members are registered (a live member would
overwrite the new offsets at its next commit, or re-create what was deleted) unless
``force=True``.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kazoo.exceptions import NoNodeError

from broker.client.consumer import SimpleConsumer
from broker.client.group import offsets as reg
from broker.client.group.access import check_group_access, group_refusals
from broker.client.group.assignment import Subscription, resolve_subscription
from broker.client.group.consumer import StartAt, resolve_position
from broker.client.group.lag import group_lag
from broker.client.group.offsets import Committed, Member, TopicPartition
from broker.client.group.owners_cache import OwnersCache
from broker.client.group.status import StatusWindows, group_status
from broker.common.acl import Operation
from broker.common.errors import ConfigError, LogferryError
from broker.common.names import validate_group_name
from broker.common.sasl import SaslCredentials
from broker.common.tls import TlsConfig
from broker.coordination import zk as zkmod


class GroupAdmin:
    """Administration of the consumer groups of one cluster (reached through ZooKeeper).

    ``brokers=False`` skips connecting to the brokers: listing, reading offsets and
    deleting need only ZooKeeper. With brokers, one that is down does not fail the
    whole view: its partitions carry an ``error`` instead of log ends and lag.
    """

    def __init__(
        self,
        zk: str,
        *,
        brokers: bool = True,
        request_timeout: float = 5.0,
        tls: TlsConfig | ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        listener: str | None = None,
        cache_owners: bool = False,
    ):
        if not zk:
            raise ConfigError("consumer groups live in ZooKeeper: pass zk= (a connect string with chroot)")
        self.zk_connect = zk
        self._zk = zkmod.connect(zk, create=False)
        self._owners = OwnersCache(self._zk) if cache_owners else None
        """``cache_owners=True`` (a dashboard describing groups every second): owners are
        read again only after ZooKeeper says they changed (:mod:`.owners_cache`)."""
        self._simple: SimpleConsumer | None = None
        if brokers:
            try:
                self._simple = SimpleConsumer(
                    zk=zk, request_timeout=request_timeout, metadata_retries=1, tls=tls, sasl=sasl, listener=listener
                )
            except LogferryError:
                self._simple = None

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the ZooKeeper session and the broker connections."""
        if self._simple is not None:
            self._simple.close()
            self._simple = None
        zkmod.close(self._zk)

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def brokers_reachable(self) -> bool:
        """Whether a broker answered when this admin was created."""
        return self._simple is not None

    # -- reading -----------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """Every group with a znode under ``/consumers``, sorted."""
        return reg.list_groups(self._zk)

    def exists(self, group: str) -> bool:
        """Whether the group has any znode (members, owners or offsets)."""
        validate_group_name(group)
        return self._zk.exists(reg.group_path(group)) is not None

    def require(self, group: str) -> None:
        """Raise ConfigError naming the cluster when the group does not exist."""
        if not self.exists(group):
            raise ConfigError(
                f"no consumer group {group!r} at {self.zk_connect} (`logferry group list` shows the groups)"
            )

    def members(self, group: str) -> dict[str, Member]:
        """Registered members by consumer id."""
        with group_refusals(self._zk, group, Operation.DESCRIBE):
            return reg.read_members(self._zk, group)

    def offsets(self, group: str, topics: Iterable[str] | None = None) -> dict[TopicPartition, Committed]:
        """Committed positions of the given (default: all) topics."""
        with group_refusals(self._zk, group, Operation.DESCRIBE):
            return reg.read_offsets(self._zk, group, topics)

    def owners(self, group: str, topics: Iterable[str] | None = None) -> dict[TopicPartition, str]:
        """``{(topic, partition): owner consumer id}`` of the given (default: all) topics."""
        with group_refusals(self._zk, group, Operation.DESCRIBE):
            if self._owners is not None:
                return self._owners.read(group, topics)
            return reg.read_owners(self._zk, group, topics)

    def topics(self) -> list[str]:
        """Every topic registered in the cluster, sorted."""
        try:
            return sorted(self._zk.get_children(zkmod.BROKER_TOPICS))
        except NoNodeError:
            return []

    def partitions(self, topic: str) -> list[int]:
        """Partition numbers of a registered topic (ConfigError when there is none)."""
        try:
            raw, _ = self._zk.get(zkmod.topic_path(topic))
        except NoNodeError:
            raise ConfigError(f"no topic {topic!r} (`logferry topic list` shows the topics)") from None
        return sorted(zkmod.read_assignment(raw))

    # -- lag ---------------------------------------------------------------------------------

    def lag(
        self,
        group: str,
        topics: Iterable[str],
        offsets: Mapping[TopicPartition, Committed] | None = None,
        owners: Mapping[TopicPartition, str] | None = None,
        log_ranges: Mapping[TopicPartition, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """One row per partition of ``topics``: owner, committed position, log range, lag.

        Row keys: ``topic, partition, owner, committed, skip, committed_at_ms, log_start,
        log_end, lag_bytes, lag_messages, gap`` and, when its broker did not answer,
        ``error`` (log ends and lag are then None). ``gap`` says the committed offset
        was deleted by retention. Partitions of a deleted topic are those the group
        still records. ``log_ranges`` (``{tp: offset_info answer or error}``) spares
        asking the brokers again when the caller already has them; the rest are asked
        for at once (pipelined).
        """
        names = sorted(set(topics))
        offsets = self.offsets(group, names) if offsets is None else offsets
        owners = self.owners(group, names) if owners is None else owners
        wanted: list[TopicPartition] = []
        for topic in names:
            try:
                numbers = self.partitions(topic)
            except ConfigError:  # topic deleted: show what the group still records
                numbers = sorted({p for t, p in offsets if t == topic} | {p for t, p in owners if t == topic})
            wanted += [(topic, p) for p in numbers]
        ranges: dict[TopicPartition, Any] = dict(log_ranges or {})
        missing = [tp for tp in wanted if tp not in ranges]
        if missing and self._simple is not None:
            ranges.update(self._simple.offset_infos(missing))
        return [self._row(t, p, offsets.get((t, p)), owners.get((t, p)), ranges.get((t, p))) for t, p in wanted]

    def _row(
        self, topic: str, partition: int, committed: Committed | None, owner: str | None, info: Any = None
    ) -> dict[str, Any]:
        row: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "owner": owner,
            "committed": committed.offset if committed else None,
            "skip": committed.skip if committed else None,
            "committed_at_ms": committed.time if committed else None,
            "log_start": None,
            "log_end": None,
            "lag_bytes": None,
            "lag_messages": None,
            "gap": False,
        }
        if info is None:
            if self._simple is None:  # brokers=False, or none answered: ZooKeeper's view only
                return row
            try:
                info = self._simple.offset_info(topic, partition)
            except LogferryError as exc:
                info = exc
        if isinstance(info, LogferryError):  # a broker down must not hide the rest
            row["error"] = str(info)
            return row
        row["log_start"], row["log_end"] = info["start"], info["end"]
        lag = group_lag(
            info["end"], committed[:2] if committed else None, info["start"], float(info.get("avg_message_bytes") or 0)
        )
        if lag is not None:
            row["lag_bytes"], row["lag_messages"] = lag.bytes, lag.messages
        row["gap"] = committed is not None and committed.offset < info["start"]
        return row

    def describe(
        self, group: str, windows: StatusWindows | None = None, log_ranges: Mapping[TopicPartition, Any] | None = None
    ) -> dict[str, Any]:
        """Members and, per partition the group subscribes to, owns or committed, its lag
        and status.

        Plain data (JSON-able): ``{"group", "status", "members": {id: registration fields +
        registered_ms}, "partitions": [rows of :meth:`lag` + status]}``. The status is
        Burrow's (:mod:`.status`) over ``windows``, which this reading feeds: pass the
        same :class:`StatusWindows` to repeated calls to judge a window of commits (one
        reading alone judges nothing and says OK). ``log_ranges``: as for :meth:`lag`.
        """
        info = self._describe(group, log_ranges)
        windows = StatusWindows() if windows is None else windows
        now_ms = int(time.time() * 1000)
        for row in info["partitions"]:
            key = (group, row["topic"], row["partition"])
            if row["committed"] is not None and row["lag_bytes"] is not None:
                windows.observe(key, row["committed"], row["lag_bytes"], row["committed_at_ms"] or 0)
            verdict = windows.status(key, now_ms, row["lag_bytes"])
            row["status"], row["window_complete"] = verdict.status, round(verdict.complete, 2)
        info["status"] = group_status(r["status"] for r in info["partitions"])
        return info

    def _describe(self, group: str, log_ranges: Mapping[TopicPartition, Any] | None) -> dict[str, Any]:
        members = self.members(group)
        offsets = self.offsets(group)
        owners = self.owners(group)
        all_topics = self.topics()
        topics = {t for t, _ in offsets} | {t for t, _ in owners}
        for member in members.values():
            topics |= set(resolve_subscription(Subscription.from_json(member.data), all_topics))
        return {
            "group": group,
            "members": {cid: {**m.data, "registered_ms": m.ctime_ms} for cid, m in sorted(members.items())},
            "partitions": self.lag(group, topics, offsets, owners, log_ranges),
        }

    # -- writing -----------------------------------------------------------------------------

    def _refuse_while_active(self, group: str, force: bool, action: str) -> None:
        members = self.members(group)
        if members and not force:
            raise ConfigError(
                f"group {group!r} has {len(members)} active member(s) "
                f"({', '.join(sorted(members))}); stop them before you {action}, "
                "or force it (--force)"
            )

    def seek(
        self, group: str, topic: str, to: StartAt, partitions: Iterable[int] | None = None, force: bool = False
    ) -> dict[TopicPartition, tuple[Committed | None, Committed]]:
        """Set the group's committed positions of ``topic`` (all partitions by default).

        ``to`` is ``"earliest"``, ``"latest"``, a byte offset or a datetime (the first
        message stamped at or after it). Returns ``{tp: (before, after)}``.
        """
        self.require(group)
        check_group_access(self._zk, group, Operation.CONSUME)
        self._refuse_while_active(group, force, "seek")
        if self._simple is None:
            raise ConfigError("no broker reachable to resolve offsets; start the brokers first")
        available = self.partitions(topic)
        chosen = sorted(set(partitions)) if partitions else available
        unknown = [p for p in chosen if p not in available]
        if unknown:
            raise ConfigError(f"topic {topic!r} has partitions {available}, not {unknown}")
        before = self.offsets(group, [topic])
        positions = {}
        for p in chosen:
            offset, skip = resolve_position(self._simple, topic, p, to)
            positions[(topic, p)] = Committed.now(offset, skip)
        with group_refusals(self._zk, group, Operation.CONSUME):
            reg.write_offsets(self._zk, group, positions)
        return {tp: (before.get(tp), new) for tp, new in sorted(positions.items())}

    def copy_offsets(
        self, group: str, to: GroupAdmin, topics: Iterable[str] | None = None, force: bool = False
    ) -> dict[TopicPartition, tuple[Committed, int | None]]:
        """Write this cluster's committed positions of ``group`` into cluster ``to``.

        For clusters joined by the offset-preserving mirror (``mode = "preserve"``): an
        offset means the same batch on both, so a consumer group fails over without any
        translation. Refuses while ``to`` has members of the group (they would overwrite
        it) unless ``force``. Returns ``{tp: (position, target log end or None)}``; a
        position past the target's end is not copied there yet (the mirror lags).
        """
        self.require(group)
        check_group_access(to._zk, group, Operation.CONSUME)
        to._refuse_while_active(group, force, "copy offsets into it")
        positions = self.offsets(group, topics)
        with group_refusals(to._zk, group, Operation.CONSUME):
            reg.write_offsets(to._zk, group, positions)
        out: dict[TopicPartition, tuple[Committed, int | None]] = {}
        for tp, committed in sorted(positions.items()):
            end = None
            if to._simple is not None:
                try:
                    end = to._simple.offsets(*tp).end
                except LogferryError:
                    end = None
            out[tp] = (committed, end)
        return out

    def delete(self, group: str, force: bool = False) -> None:
        """Remove every znode of the group (members, owners, offsets)."""
        self.require(group)
        self._refuse_while_active(group, force, "delete it")
        with group_refusals(self._zk, group, Operation.DELETE):
            reg.delete_group(self._zk, group)


__all__ = ["GroupAdmin"]
