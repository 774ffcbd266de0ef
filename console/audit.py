"""The audit view: per topic and window, the counts each stage published to ``_audit``.

Every stage that counts (today the agent: ``sent`` and ``acked``; a stage that later
publishes its own records, such as the mirror, appears as another column) writes
:class:`broker.client.AuditRecord` maps to the audit topic (the paper, section 5).
:class:`AuditTally` adds them up per ``(topic, window_start)`` and stage (records of one
host, topic and window add up, docs/agent.md); :class:`AuditReader` feeds it from a
cluster's audit topic, reading only what is new at each poll.

Completeness of a stage is its count over the first stage's ``acked`` (the agent's:
what the brokers acknowledged), shown as a percentage; over 100% means duplicates.
"""

from __future__ import annotations

from typing import Any

from broker.client import AGENT_STAGE, AuditRecord, LogferryError, SimpleConsumer, messages_of

MAX_WINDOWS = 48
"""Windows kept per topic (the newest)."""
MAX_READ_BYTES = 4 * 1024 * 1024
"""At most this much of the audit topic is read per partition and poll."""


class AuditTally:
    """Sums of audit records per (topic, window) and stage (sans IO)."""

    def __init__(self, max_windows: int = MAX_WINDOWS):
        self.max_windows = max_windows
        self.windows: dict[tuple[str, int], dict[str, Any]] = {}

    def add(self, record: AuditRecord) -> None:
        """Count one record."""
        key = (record.topic, record.window_start)
        window = self.windows.setdefault(key, {"topic": record.topic, "window_start": record.window_start,
                                               "window_end": record.window_end, "stages": {},
                                               "hosts": set()})
        stage = window["stages"].setdefault(record.stage, {"sent": 0, "acked": 0})
        stage["sent"] += record.sent
        stage["acked"] += record.acked
        if record.host:
            window["hosts"].add(record.host)
        self._trim(record.topic)

    def _trim(self, topic: str) -> None:
        keys = sorted(k for k in self.windows if k[0] == topic)
        for key in keys[:-self.max_windows]:
            del self.windows[key]

    def rows(self) -> list[dict[str, Any]]:
        """One row per (topic, window), newest window first: counts per stage and each
        later stage's completeness against the agent's acknowledged count."""
        out = []
        for (topic, start), w in sorted(self.windows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            stages = {name: dict(counts) for name, counts in sorted(w["stages"].items())}
            base = stages.get(AGENT_STAGE, {}).get("acked") or 0
            for name, counts in stages.items():
                if name == AGENT_STAGE:
                    counts["complete_pct"] = round(100.0 * counts["acked"] / counts["sent"], 2) \
                        if counts["sent"] else None
                else:
                    counts["complete_pct"] = round(100.0 * counts["acked"] / base, 2) if base else None
            out.append({"topic": topic, "window_start": start, "window_end": w["window_end"],
                        "hosts": len(w["hosts"]), "stages": stages})
        return out


class AuditReader:
    """Reads a cluster's audit topic from its start, a little more at each poll."""

    def __init__(self, topic: str = "_audit"):
        self.topic = topic
        self.tally = AuditTally()
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


__all__ = ["AuditReader", "AuditTally", "read_audit"]
