"""One cluster's state for the page, read through the client library about once a second.

Each :meth:`ClusterPoller.poll` makes one metadata request (brokers, controller,
partitions with leader, replicas and ISR), one pipelined OFFSETS request per partition
(log start and visible end), and reads the consumer groups' znodes (members, owners,
committed positions) with :class:`broker.client.GroupAdmin`. Everything else is
derived here:

- rates, over a trailing window of readings (:mod:`console.rates`): bytes in per second
  are the growth of the visible ends (offsets are byte offsets), messages in per second
  the growth of their message offsets, which the broker counts (``end_message``; from a
  broker that reports none, the bytes' growth over its average stored message size,
  marked as an estimate); bytes out per second are the growth of the groups' committed
  offsets (what consumers consumed, as far as they committed it);
- lag in messages counted where the committed offset is an end seen at a reading
  (:class:`console.rates.MessagePositions`), else placed between two seen ends and marked
  an estimate;
- lag by the one formula (:func:`broker.client.group_lag`) and each group's status by
  Burrow's rules (:mod:`broker.client.group.status`) over the commits seen since the
  console started, through the same :meth:`GroupAdmin.describe` as ``logferry group
  describe``; each group's last readings of lag and status (:mod:`console.lag_history`).

Blocking (the client library is); the server runs it in a worker thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.client import (
    Admin,
    BrokerNotAvailableError,
    GroupAdmin,
    LogferryError,
    RequestTimedOutError,
    SimpleConsumer,
    StatusWindows,
)
from console.agents import AgentsReader, read_agents
from console.audit import MIRROR_SUFFIX, AuditReader, read_audit
from console.config import ClusterConfig
from console.lag_history import LagHistory, LagReading
from console.rates import History, MessagePositions, Rates

log = logging.getLogger("logferry.console")

SERIES = ("bytes_in_s", "msgs_in_s", "bytes_out_s")
LISTENERS_REFRESH_S = 30.0
"""Brokers' registrations (their listeners) are read again at least this often, and at
once when the set of live brokers changes; they change only when a broker restarts."""


class ClusterPoller:
    """Reads one cluster; keeps what rates and statuses need between readings."""

    def __init__(
        self, config: ClusterConfig, request_timeout: float = 5.0, audit_topic: str = "_audit", settle_s: float = 60.0
    ):
        self.config = config
        self._audit = AuditReader(audit_topic, settle_s=settle_s)
        self._mirror_audit = AuditReader(audit_topic + MIRROR_SUFFIX, self._audit.tally)
        self._agents = AgentsReader()
        self.request_timeout = request_timeout
        self._admin: Admin | None = None
        self._groups: GroupAdmin | None = None
        self._consumer: SimpleConsumer | None = None
        self._stopped = False
        """Set by :meth:`stop`: a reading still running in its thread ends quietly."""
        self._rates = Rates()
        self._positions = MessagePositions()
        self._ends: dict[tuple[str, int], tuple[int, int]] = {}
        """(topic, partition) -> (byte end, message end) of this reading, for the lags."""
        self._windows = StatusWindows()
        self._lag_history = LagHistory()
        self._listeners: dict[int, list[dict[str, Any]]] = {}
        self._listeners_key: tuple[frozenset[int], float] = (frozenset(), 0.0)
        self.history = History(SERIES)
        self.last: dict[str, Any] = {"name": config.name, "zk": config.zk_connect, "ok": False, "error": "not read yet"}
        """The latest attempt: a reading, or the error instead of one (the metrics')."""
        self.good: dict[str, Any] | None = None
        """The latest reading that succeeded (the page keeps showing it, marked stale)."""
        self._seen_brokers: dict[int, dict[str, Any]] = {}
        """Each broker's address, rack and datacenter when it was last seen up."""
        self._down_since: dict[int, int] = {}
        """Broker -> the first reading (ms) that found it not registered."""
        self._silent_since: dict[int, int] = {}
        """Broker -> the first reading (ms) at which it was registered but did not answer."""

    # -- clients ---------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._admin is None:
            self._admin = Admin(zk=self.config.zk_connect, request_timeout=self.request_timeout, **self._security)
        if self._consumer is None:
            self._consumer = SimpleConsumer(
                zk=self.config.zk_connect,
                request_timeout=self.request_timeout,
                metadata_retries=1,
                max_wait_ms=0,
                **self._security,
            )
        if self._groups is None:
            self._groups = GroupAdmin(self.config.zk_connect, brokers=False, cache_owners=True, **self._security)

    @property
    def _security(self) -> dict[str, Any]:
        """``tls=``/``sasl=`` for every client toward this cluster (its config's)."""
        return {"tls": self.config.tls, "sasl": self.config.sasl}

    @property
    def audit_totals(self) -> dict[tuple[str, int], dict[str, int]]:
        """Acked per (topic, window) and stage read so far from this cluster's audit topics."""
        return self._audit.tally.totals

    @property
    def consumer(self) -> SimpleConsumer:
        """The cluster's SimpleConsumer (for the messages view)."""
        self._connect()
        assert self._consumer is not None
        return self._consumer

    def stop(self) -> None:
        """The console is stopping: close every client, and let a reading that is still
        running in its thread (its clients closed underneath it) end without a report."""
        self._stopped = True
        self.close()

    def close(self) -> None:
        """Close every client (the next reading makes them anew)."""
        for client in (self._admin, self._groups, self._consumer):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing must not fail the shutdown
                    log.debug("closing a client failed", exc_info=True)
        self._admin = self._groups = self._consumer = None

    # -- reading -----------------------------------------------------------------------------

    def poll(self) -> dict[str, Any]:
        """Read the cluster once; returns (and keeps as :attr:`last`) the page's view of it."""
        started = time.time()
        if self._stopped:
            return self.last
        try:
            self._connect()
            snapshot = self._read()
        except Exception as exc:
            if self._stopped:
                log.debug("cluster %s: reading cut short by the console stopping: %r", self.config.name, exc)
                return self.last
            if not isinstance(exc, (LogferryError, OSError, KazooException, KazooTimeoutError)):
                raise
            # ZooKeeper errors included: a session that expired (a long GC pause, the
            # machine suspended) is shown and the clients are made anew next time
            log.warning("cluster %s: %s", self.config.name, exc or type(exc).__name__)
            self.close()
            snapshot = {
                "name": self.config.name,
                "zk": self.config.zk_connect,
                "ok": False,
                "error": str(exc) or type(exc).__name__,
                "history": self.history.as_dict(),
            }
        else:
            snapshot["answered_ms"] = int(time.time() * 1000)
            self.good = snapshot
        snapshot["poll_ms"] = round((time.time() - started) * 1000, 1)
        self.last = snapshot
        if self._stopped:  # stopped while reading: close what this reading may have opened
            self.close()
        return snapshot

    def view(self, now_ms: int, stale_ms: float) -> dict[str, Any]:
        """The page's view at ``now_ms``: the latest good reading with ``as_of_ms`` (when
        it began), ``age_ms`` (since it was answered) and ``stale`` (no answer for more
        than ``stale_ms``), and the latest attempt's ``ok`` and ``error``; the error
        alone before any good reading (``read`` missing: the page says unreachable)."""
        last = self.last
        if self.good is None:
            return {**last, "as_of_ms": None, "age_ms": None, "stale": True}
        as_of = int(self.good["time_ms"])
        age = max(now_ms - int(self.good["answered_ms"]), 0)
        return {
            **self.good,
            "ok": last is self.good,
            "error": last.get("error"),
            "read": True,
            "as_of_ms": as_of,
            "age_ms": age,
            "stale": age > stale_ms,
            "history": self.history.as_dict(),
        }

    def _read(self) -> dict[str, Any]:
        assert self._admin is not None and self._groups is not None and self._consumer is not None
        now = time.time()
        state = self._admin.describe_cluster()
        pairs = [(t, p) for t, parts in state.topics.items() for p in parts]
        asked = time.time()
        ranges = self._consumer.offset_infos(pairs)
        read_at = (asked + time.time()) / 2  # when the ends were read, for their rates
        silent = unreachable_leaders(state.topics, ranges)

        topics = []
        totals = {"bytes_in_s": 0.0, "msgs_in_s": 0.0}
        counted = True
        self._ends = {}
        offline = under = not_preferred = 0
        for name, parts in state.topics.items():
            rows = []
            t_in = t_msgs = 0.0
            t_counted = True
            window: tuple[float, float] | None = None
            size = 0
            for p, info in parts.items():
                row: dict[str, Any] = {
                    "partition": p,
                    "leader": info.leader,
                    "replicas": info.replicas,
                    "isr": info.isr,
                    "offline": info.leader < 0,
                    "under_replicated": info.under_replicated,
                    "log_start": None,
                    "log_end": None,
                    "size": None,
                    "bytes_in_s": 0.0,
                    "msgs_in_s": 0.0,
                    "msgs_counted": False,
                }
                offline += row["offline"]
                under += row["under_replicated"]
                # led by another replica while the preferred one (the first) is in sync:
                # `logferry topic elect-leaders` would hand it back (a broker that came back)
                row["not_preferred"] = bool(
                    info.leader >= 0
                    and info.replicas
                    and info.leader != info.replicas[0]
                    and info.replicas[0] in info.isr
                )
                not_preferred += row["not_preferred"]
                got = ranges.get((name, p))
                if isinstance(got, dict):
                    start, end = int(got["start"]), int(got["end"])
                    row.update(log_start=start, log_end=end, size=end - start)
                    rate = self._rates.update(("in", name, p), end, read_at)
                    row["bytes_in_s"] = round(rate, 1)
                    row["msgs_in_s"], row["msgs_counted"] = self._message_rate(name, p, got, rate, read_at)
                    t_in += rate
                    t_msgs += row["msgs_in_s"]
                    t_counted = t_counted and row["msgs_counted"]
                    window = window or self._rates.window(("in", name, p))
                    size += end - start
                elif got is not None:
                    row["error"] = str(got)
                rows.append(row)
            totals["bytes_in_s"] += t_in
            totals["msgs_in_s"] += t_msgs
            counted = counted and t_counted
            topics.append(
                {
                    "name": name,
                    "partitions": rows,
                    "bytes_in_s": round(t_in, 1),
                    "msgs_in_s": round(t_msgs, 1),
                    "msgs_counted": t_counted,
                    "rate_window_ms": [int(window[0] * 1000), int(window[1] * 1000)] if window else None,
                    "size": size,
                    "config": state.configs.get(name, {}),
                }
            )

        groups, bytes_out = self._read_groups(ranges, now)

        # the audit and heartbeat topics' partitions whose leader answered this reading: a
        # fetch from one that did not would wait out the request timeout (and freeze the
        # card); what it holds is read at a later reading
        def answering(topic: str) -> list[int]:
            parts = state.topics.get(topic, {})
            return sorted(p for p, info in parts.items() if info.leader not in silent)

        audit_parts = answering(self._audit.topic)
        audit = read_audit(self._audit, self._consumer, audit_parts) if audit_parts else None
        mirror_parts = answering(self._mirror_audit.topic)
        if mirror_parts:  # a mirror's own counts (mirror/audit.py): same tally, more stages
            audit = read_audit(self._mirror_audit, self._consumer, mirror_parts)
        agent_parts = answering(self._agents.topic)
        agents = read_agents(self._agents, self._consumer, agent_parts) if agent_parts else None
        live = state.brokers
        known = sorted(set(live) | {b for parts in state.topics.values() for i in parts.values() for b in i.replicas})
        leaders: dict[int, int] = {}
        for parts in state.topics.values():
            for info in parts.values():
                leaders[info.leader] = leaders.get(info.leader, 0) + 1
        listeners = self._read_listeners(frozenset(live), now)
        brokers = self._brokers(known, live, state.controller, leaders, listeners, int(now * 1000), silent)
        time_ms = int(now * 1000)
        summary = {
            "brokers_up": sum(1 for b in brokers if b["up"] and b["answering"]),
            "brokers": len(known),
            "not_answering": sum(1 for b in brokers if b["up"] and not b["answering"]),
            "controller": state.controller,
            "topics": len(topics),
            "partitions": len(pairs),
            "offline": offline,
            "under_replicated": under,
            "not_preferred": not_preferred,
            "bytes_in_s": round(totals["bytes_in_s"], 1),
            "msgs_in_s": round(totals["msgs_in_s"], 1),
            "msgs_counted": counted,
            "bytes_out_s": round(bytes_out, 1),
            "groups_not_ok": sum(1 for g in groups if g["status"] != "OK"),
        }
        self.history.add(time_ms, **summary)
        self._positions.forget(pairs)
        self._rates.forget(
            {("in", t, p) for t, p in pairs}
            | {("msgs", t, p) for t, p in pairs}
            | {("out", g["name"], r["topic"], r["partition"]) for g in groups for r in g["partitions"]}
        )
        return {
            "name": self.config.name,
            "zk": self.config.zk_connect,
            "ok": True,
            "error": None,
            "time_ms": time_ms,
            "summary": summary,
            "brokers": brokers,
            "topics": topics,
            "groups": groups,
            "audit": audit,
            "agents": agents,
            "history": self.history.as_dict(),
        }

    def _message_rate(
        self, topic: str, partition: int, got: dict[str, Any], bytes_rate: float, now: float
    ) -> tuple[float, bool]:
        """(messages in per second, counted?): from the message offsets of the ends the
        broker reported (exact), else, from a broker that reports none, the bytes' rate over
        its average stored message size (an estimate, and the page says so)."""
        end_message = got.get("end_message")
        if isinstance(end_message, int):
            end = int(got["end"])
            self._positions.add((topic, partition), end, end_message, now)
            self._ends[(topic, partition)] = (end, end_message)
            return round(self._rates.update(("msgs", topic, partition), end_message, now), 1), True
        avg = float(got.get("avg_message_bytes") or 0)
        return (round(bytes_rate / avg, 1) if avg > 0 else 0.0), False

    def _time_lag(self, row: dict[str, Any], now: float) -> None:
        """``lag_s``: how long ago the oldest message the group has not consumed reached
        the broker, from the ends seen at the readings (``lag_s_at_least`` when it came
        before the oldest one kept); None without a commit or a reading."""
        row["lag_s"], row["lag_s_at_least"] = None, False
        if row["committed"] is None:
            return
        found = self._positions.behind_s((row["topic"], row["partition"]), row["committed"], now)
        if found is not None:
            row["lag_s"], row["lag_s_at_least"] = round(found[0], 1), not found[1]

    def _message_lag(self, row: dict[str, Any], start_message: int | None) -> bool:
        """Replace ``row``'s estimated ``lag_messages`` by the count when it can be known
        (the committed offset is the log end, or an end seen at an earlier reading, or
        no commit and the log start); returns whether the figure is counted."""
        ends = self._ends.get((row["topic"], row["partition"]))
        if ends is None or row.get("lag_bytes") is None:
            return False
        end, end_message = ends
        committed = row["committed"]
        if committed is None:
            if start_message is None:
                return False
            row["lag_messages"] = max(end_message - start_message, 0)
            return True
        if committed >= end:
            row["lag_messages"] = 0
            return True
        found = self._positions.message_at((row["topic"], row["partition"]), committed)
        if found is None:
            return False
        at, exact = found
        row["lag_messages"] = max(end_message - at - (row.get("skip") or 0), 0)
        return exact

    def _brokers(
        self,
        known: list[int],
        live: dict[int, Any],
        controller: int | None,
        leaders: dict[int, int],
        listeners: dict[int, list[dict[str, Any]]],
        now_ms: int,
        silent: dict[int, str] | None = None,
    ) -> list[dict[str, Any]]:
        """One row per broker, live or not; a broker that is not registered keeps the
        address, rack and datacenter it had when last seen up, and says since when it is
        down (``down_since_ms``: the first reading that missed it, ``None`` if it was
        never seen up since the console started). A registered broker in ``silent``
        (broker -> error: its partitions' requests were refused or timed out) is
        ``answering: False`` since ``silent_since_ms``, the first reading it did not answer:
        killed, its registration outlives it by the ZooKeeper session timeout (10 s by
        default), and the page says so at the next reading instead."""
        silent = silent or {}
        rows = []
        for b in known:
            where = live.get(b)
            if where is None or b not in silent:
                self._silent_since.pop(b, None)
            else:
                self._silent_since.setdefault(b, now_ms)
            if where is not None:
                self._down_since.pop(b, None)
                seen = self._seen_brokers[b] = {
                    "host": where.host,
                    "port": where.port,
                    "rack": where.rack,
                    "datacenter": where.datacenter,
                }
            else:
                self._down_since.setdefault(b, now_ms)
                seen = self._seen_brokers.get(b, {"host": None, "port": None, "rack": "", "datacenter": ""})
            rows.append(
                {
                    "id": b,
                    "up": where is not None,
                    "controller": b == controller,
                    **seen,
                    "down_since_ms": None if where else self._down_since[b] if b in self._seen_brokers else None,
                    "answering": b not in self._silent_since,
                    "silent_since_ms": self._silent_since.get(b),
                    "silent_error": silent.get(b) if where else None,
                    "leaders": leaders.get(b, 0),
                    "listeners": listeners.get(b, []) if where else [],
                }
            )
        return rows

    def _read_listeners(self, live: frozenset[int], now: float) -> dict[int, list[dict[str, Any]]]:
        """Each live broker's listeners from its registration (name, protocol, address,
        security), read again when the live brokers change or every
        :data:`LISTENERS_REFRESH_S`; a failed read keeps the last one."""
        assert self._admin is not None
        known, read_at = self._listeners_key
        if live == known and now - read_at < LISTENERS_REFRESH_S:
            return self._listeners
        try:
            found = self._admin.listeners()
        except (LogferryError, OSError) as exc:
            log.warning("cluster %s: reading broker registrations: %s", self.config.name, exc)
            return self._listeners
        self._listeners = {
            b: [
                {
                    "name": lst.name,
                    "protocol": lst.protocol,
                    "address": f"{lst.host}:{lst.port}",
                    "security": lst.security,
                }
                for lst in found_listeners
            ]
            for b, found_listeners in found.items()
        }
        self._listeners_key = (live, now)
        return self._listeners

    def _read_groups(self, ranges: dict[Any, Any], now: float) -> tuple[list[dict[str, Any]], float]:
        assert self._groups is not None
        groups = []
        bytes_out = 0.0
        for name in self._groups.groups():
            try:
                info = self._groups.describe(name, self._windows, ranges)
            except LogferryError as exc:
                groups.append(
                    {
                        "name": name,
                        "status": "OK",
                        "error": str(exc),
                        "members": {},
                        "partitions": [],
                        "lag_bytes": 0,
                        "lag_messages": 0,
                    }
                )
                continue
            g_out = 0.0
            for row in info["partitions"]:
                got = ranges.get((row["topic"], row["partition"]))
                start_message = got.get("start_message") if isinstance(got, dict) else None
                row["lag_counted"] = self._message_lag(row, start_message)
                self._time_lag(row, now)
                if row["committed"] is not None:
                    g_out += self._rates.update(("out", name, row["topic"], row["partition"]), row["committed"], now)
            bytes_out += g_out
            group = {
                "name": name,
                "status": info["status"],
                "members": info["members"],
                "partitions": info["partitions"],
                "bytes_out_s": round(g_out, 1),
                "lag_bytes": sum(r["lag_bytes"] or 0 for r in info["partitions"]),
                "lag_messages": sum(r["lag_messages"] or 0 for r in info["partitions"]),
                "lag_counted": all(r["lag_counted"] for r in info["partitions"]),
                "lag_s": max((r["lag_s"] for r in info["partitions"] if r["lag_s"] is not None), default=None),
            }
            self._lag_history.add(
                name,
                LagReading(int(now * 1000), group["lag_messages"], group["lag_bytes"], group["lag_s"], group["status"]),
            )
            group["history"] = self._lag_history.view(name)
            groups.append(group)
        self._lag_history.forget(str(g["name"]) for g in groups)
        return groups, bytes_out


def unreachable_leaders(topics: dict[str, dict[int, Any]], ranges: dict[Any, Any]) -> dict[int, str]:
    """Leader -> the error of its partitions whose offsets could not be read because
    the leader could not be reached (refused, reset, timed out): the brokers that did not
    answer this reading, whatever ZooKeeper still says (sans IO)."""
    silent: dict[int, str] = {}
    for topic, parts in topics.items():
        for partition, info in parts.items():
            got = ranges.get((topic, partition))
            if info.leader >= 0 and isinstance(got, (BrokerNotAvailableError, RequestTimedOutError)):
                silent.setdefault(info.leader, str(got) or type(got).__name__)
    return silent


__all__ = ["ClusterPoller", "SERIES", "unreachable_leaders"]
