"""The audit view: per topic and window, the counts each stage published to ``_audit``.

Every stage that counts (today the agent: ``sent`` and ``acked``; a stage that later
publishes its own records, such as the mirror, appears as another column) writes
:class:`broker.client.AuditRecord` maps to the audit topic (the paper, section 5).
:class:`AuditTally` adds them up per ``(topic, window_start)`` and stage (records of one
host, topic and window add up, docs/agent.md); :class:`AuditReader` feeds it from a
cluster's audit topic, reading only what is new at each poll.

Completeness of a stage is its count over the ``acked`` of the tier before it in pipeline
order (agent -> mirror -> landed, :data:`broker.client.STAGE_ORDER`; the agent's own is
acked / sent), shown as a percentage; over 100% means duplicates that tier made. Every
tier counts a message in the window of its own timestamp (event time), so a failover or
a slow tier moves nothing between windows; a window is judged only once it is settled
(:func:`window_state`): while open or settling its figures are shown but not coloured.

:func:`pipeline_rows` joins the clusters: each stage is read from the first cluster (in
the console's order, live first) whose audit topic holds records of it, so the agents'
records come from the live cluster where they were published, not from the mirror's
copies on the analysis cluster (which a mirror copying twice doubles too), and the
mirror's from the analysis cluster, where it publishes them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from broker.client import (
    AGENT_STAGE,
    AuditRecord,
    LogferryError,
    SimpleConsumer,
    messages_of,
    stage_rank,
)

MIRROR_SUFFIX = ".mirror"
"""A mirror publishes its counts to ``<audit topic>.mirror`` on its target (the audit topic
itself is a copy of the source's there); the console reads both into one tally."""
MAX_WINDOWS = 48
"""Windows kept per topic (the newest)."""
TOTALS_MS = 72 * 3600 * 1000
"""Per-window totals are kept this long (the landed tier compares hours, :mod:`console.landed`)."""
MAX_READ_BYTES = 4 * 1024 * 1024
"""At most this much of the audit topic is read per partition and poll."""
SETTLE_S = 60.0
"""A window is judged (amber, red) only once it ended at least this long ago (and at least
one window length): by then every tier published its count for it."""

OPEN, SETTLING, SETTLED = "open", "settling", "settled"


def window_state(start_ms: int, end_ms: int, now_ms: int, settle_ms: float) -> str:
    """``open`` while the window has not ended (its counts still grow), ``settling`` until
    it ended ``settle_ms`` (at least one window length) ago, when a tier that is late
    (a mirror behind, a producer retrying after a failover) may still add to it, then
    ``settled``: only a settled window's completeness is a finding."""
    if now_ms < end_ms:
        return OPEN
    if now_ms < end_ms + max(settle_ms, end_ms - start_ms):
        return SETTLING
    return SETTLED


class AuditTally:
    """Sums of audit records per (topic, window) and stage (sans IO)."""

    def __init__(self, max_windows: int = MAX_WINDOWS, settle_s: float = SETTLE_S):
        self.max_windows = max_windows
        self.settle_ms = settle_s * 1000
        self.windows: dict[tuple[str, int], dict[str, Any]] = {}
        self.totals: dict[tuple[str, int], dict[str, int]] = {}
        """Acked per (topic, window_start) and stage over the last :data:`TOTALS_MS`
        (whatever :attr:`max_windows` keeps): what the landed tier's hours sum."""
        self._trim_totals_at = 1024

    def add(self, record: AuditRecord) -> None:
        """Count one record."""
        key = (record.topic, record.window_start)
        window = self.windows.setdefault(
            key,
            {
                "topic": record.topic,
                "window_start": record.window_start,
                "window_end": record.window_end,
                "stages": {},
                "hosts": set(),
            },
        )
        stage = window["stages"].setdefault(record.stage, {"sent": 0, "acked": 0})
        stage["sent"] += record.sent
        stage["acked"] += record.acked
        if record.host:
            window["hosts"].add(record.host)
        self._trim(record.topic)
        total = self.totals.setdefault(key, {})
        total[record.stage] = total.get(record.stage, 0) + record.acked
        if len(self.totals) >= self._trim_totals_at:
            newest = max(start for _, start in self.totals)
            self.totals = {k: v for k, v in self.totals.items() if k[1] > newest - TOTALS_MS}
            self._trim_totals_at = max(1024, 2 * len(self.totals))

    def _trim(self, topic: str) -> None:
        keys = sorted(k for k in self.windows if k[0] == topic)
        for key in keys[: -self.max_windows]:
            del self.windows[key]

    def rows(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """One row per (topic, window), newest window first: counts per stage, each
        stage's completeness against the tier before it (:func:`tier_completeness`) and
        the window's ``state`` at ``now_ms`` (:func:`window_state`)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        starts = tier_starts(
            {"topic": t, "window_start": s, "stages": w["stages"]} for (t, s), w in self.windows.items()
        )
        out = []
        for (topic, start), w in sorted(self.windows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            stages = tier_completeness(
                {name: dict(counts) for name, counts in w["stages"].items()}, expected_tiers(starts, topic, start)
            )
            out.append(
                {
                    "topic": topic,
                    "window_start": start,
                    "window_end": w["window_end"],
                    "hosts": len(w["hosts"]),
                    "stages": stages,
                    "state": window_state(start, w["window_end"], now_ms, self.settle_ms),
                }
            )
        return out


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def tier_completeness(stages: dict[str, dict[str, Any]], expected: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """Order ``{stage: {"sent", "acked", ...}}`` by tier and add ``complete_pct``: the
    agent's acked / sent, every later stage's acked over the previous tier's acked (None
    when that is 0), with ``of`` naming that tier.

    A tier of ``expected`` that published nothing for the window is put in its place as
    ``{"missing": True, "sent": None, "acked": None, "complete_pct": None}`` (with
    ``counted_after``: whether a later tier counted the window), and the tier after it
    is judged against nothing (``complete_pct`` None, ``of`` the missing tier): judged
    against the tiers present only, an absent agent tier made the mirror look 100%.
    """
    names = sorted(set(stages) | set(expected), key=stage_rank)
    out: dict[str, dict[str, Any]] = {}
    previous: str | None = None
    for i, name in enumerate(names):
        if name not in stages:
            later = any(n in stages for n in names[i + 1 :])
            out[name] = {"sent": None, "acked": None, "complete_pct": None, "missing": True, "counted_after": later}
            if previous is not None:
                out[name]["of"] = previous
            previous = name
            continue
        counts = stages[name]
        if name == AGENT_STAGE or previous is None:
            counts["complete_pct"] = _pct(counts["acked"], counts["sent"])
        else:
            base = out[previous]["acked"]
            counts["complete_pct"] = _pct(counts["acked"], base) if base is not None else None
            counts["of"] = previous
        out[name] = counts
        previous = name
    return out


def tier_starts(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(topic, stage) -> the first window the rows hold a count of that stage for: a
    window from then on without that stage's count is missing one, an earlier one is
    simply before what is kept (or before the tier existed)."""
    starts: dict[tuple[str, str], int] = {}
    for row in rows:
        for stage in row["stages"]:
            key = (row["topic"], stage)
            starts[key] = min(starts.get(key, row["window_start"]), row["window_start"])
    return starts


def expected_tiers(starts: dict[tuple[str, str], int], topic: str, window_start: int) -> list[str]:
    """The stages that count ``topic`` from ``window_start`` or earlier (:func:`tier_starts`)."""
    return [stage for (t, stage), first in starts.items() if t == topic and first <= window_start]


def pipeline_rows(
    views: list[tuple[str, dict[str, Any] | None]], now_ms: int | None = None, settle_s: float = SETTLE_S
) -> list[dict[str, Any]]:
    """The pipeline across clusters: per (topic, window), each stage's counts from the first
    cluster of ``views`` (``(cluster name, audit view)``, live first) that has records of
    that stage, with completeness between consecutive tiers; ``cluster`` names the source;
    ``state`` is the window's at ``now_ms`` (:func:`window_state`)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    home: dict[str, str] = {}
    for name, view in views:
        for row in (view or {}).get("rows", []):
            for stage, counts in row["stages"].items():
                if not counts.get("missing"):
                    home.setdefault(stage, name)
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for name, view in views:
        for row in (view or {}).get("rows", []):
            key = (row["topic"], row["window_start"])
            target = merged.setdefault(
                key,
                {
                    "topic": row["topic"],
                    "window_start": row["window_start"],
                    "window_end": row["window_end"],
                    "stages": {},
                },
            )
            for stage, counts in row["stages"].items():
                if home[stage] == name and not counts.get("missing"):
                    target["stages"][stage] = {"sent": counts["sent"], "acked": counts["acked"], "cluster": name}
    starts = tier_starts(merged.values())
    rows = []
    for (topic, start), row in sorted(merged.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        row["stages"] = tier_completeness(row["stages"], expected_tiers(starts, topic, start))
        row["state"] = window_state(start, row["window_end"], now_ms, settle_s * 1000)
        rows.append(row)
    return rows


class AuditReader:
    """Reads a cluster's audit topic from its start, a little more at each poll."""

    def __init__(self, topic: str = "_audit", tally: AuditTally | None = None, settle_s: float = SETTLE_S):
        self.topic = topic
        self.tally = AuditTally(settle_s=settle_s) if tally is None else tally
        """Shared by the readers of one cluster's audit topics (``_audit``, ``_audit.mirror``)."""
        self.positions: dict[int, int] = {}
        self.skipped = 0
        """Messages on the audit topic that were not audit records."""

    def poll(self, consumer: SimpleConsumer, partitions: list[int]) -> None:
        """Read what is new in every partition (LogferryError propagates)."""
        for p in partitions:
            offset = self.positions.get(p)
            if offset is None:
                offset = consumer.offsets(self.topic, p).start
            result = consumer.fetch(self.topic, p, offset, max_bytes=MAX_READ_BYTES)
            for batch in result.batches:
                for message in messages_of(self.topic, p, batch):
                    record = AuditRecord.decode(message.value) if message.value else None
                    if record is None:
                        self.skipped += 1
                    else:
                        self.tally.add(record)
            self.positions[p] = result.next_offset

    def view(self) -> dict[str, Any]:
        """The page's audit view of this cluster."""
        return {"topic": self.topic, "rows": self.tally.rows(), "skipped": self.skipped}


def read_audit(reader: AuditReader, consumer: SimpleConsumer, partitions: list[int]) -> dict[str, Any]:
    """Poll ``reader`` and return its view, with the error instead when a broker fails."""
    try:
        reader.poll(consumer, partitions)
    except LogferryError as exc:
        return {**reader.view(), "error": str(exc)}
    return reader.view()


__all__ = [
    "MIRROR_SUFFIX",
    "SETTLE_S",
    "AuditReader",
    "AuditTally",
    "expected_tiers",
    "pipeline_rows",
    "read_audit",
    "tier_completeness",
    "tier_starts",
    "window_state",
]
