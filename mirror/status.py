"""The mirror's metrics (served by :class:`broker.common.metrics_server.MetricsServer`) and
status (a JSON document, ``mirror status``).

Counters are updated by the copy loop only; gauges (lag, throughput, halted partitions)
are sampled when rendered. Lag per partition comes from the group consumer: bytes
between the processed position and the source's visible end, and an estimate in
messages from the bytes per message this process has copied of that topic.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from broker.common.metrics import Labels, Metrics, Sample
from mirror.outage import TargetOutage

WINDOW_S = 10.0
"""Throughput is averaged over this many seconds."""


class MirrorMetrics:
    """Counters and gauges of one mirror process."""

    def __init__(self, consumer_metrics: Callable[[], dict[str, Any]] | None = None):
        self.registry = Metrics("logferry_mirror")
        self.messages = self.registry.counter("messages_total", "Messages copied, acknowledged by the target")
        self.bytes = self.registry.counter("bytes_total", "Batch bytes copied, acknowledged by the target")
        self.batches = self.registry.counter("batches_total", "Batches copied as they are")
        self.rehashed = self.registry.counter(
            "rehashed_batches_total", "Batches decoded and re-hashed (target has fewer partitions)"
        )
        self.gap_bytes = self.registry.counter(
            "gap_bytes_skipped_total", "Source bytes deleted by retention before being copied (on_gap=skip)"
        )
        self.gaps = self.registry.counter("gaps_total", "Resume offsets found deleted by retention")
        self.diverged = self.registry.counter(
            "diverged_total", "Partitions stopped because the target is no copy of the source (offset-preserving mode)"
        )
        self.refused = self.registry.counter(
            "refused_total",
            "Times the target refused a topic for want of an ACL (the topic "
            "halts alone and is retried every refused_retry_s)",
        )
        self.halted: dict[tuple[str, int], dict[str, Any]] = {}
        self.consumer_metrics = consumer_metrics
        self.outage: TargetOutage | None = None
        """The copy loop's view of the target cluster (mirror/outage.py), sampled on scrape."""
        self.registry.source(
            self._outage_samples,
            counters={
                "target_outages_total": "Times the target cluster became unreachable (the copy waits and retries)",
                "target_errors_total": "Attempts to reach the target that failed transiently, by step",
            },
            gauges={"target_unavailable_seconds": "Seconds since the target became unreachable (0 while it answers)"},
        )
        self._samples: deque[tuple[float, float, float]] = deque()
        self._lock = threading.Lock()
        self.started = time.time()
        self.registry.gauge_source(
            self._gauges,
            {
                "lag_bytes": "Bytes between the mirror's position and the source's visible end",
                "lag_messages_estimate": "Lag in messages, estimated from copied bytes per message",
                "messages_per_second": f"Copy rate over the last {WINDOW_S:g} s",
                "bytes_per_second": f"Copy rate over the last {WINDOW_S:g} s",
                "partition_halted": "1 when a partition stopped (a retention gap with on_gap=stop, or "
                "a diverged target)",
                "partitions_owned": "Source partitions this process copies now",
            },
        )

    def record(self, topic: str, batches: int, messages: int, nbytes: int) -> None:
        """Count batches the target acknowledged."""
        key: Labels = (("topic", topic),)
        self.batches[key] += batches
        self.messages[key] += messages
        self.bytes[key] += nbytes

    def tick(self) -> None:
        """Take a throughput sample (the copy loop calls this every round)."""
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, sum(self.messages.values()), sum(self.bytes.values())))
            while len(self._samples) > 2 and now - self._samples[1][0] > WINDOW_S:
                self._samples.popleft()

    def rates(self) -> tuple[float, float]:
        """``(messages/s, bytes/s)`` over the window."""
        with self._lock:
            if len(self._samples) < 2:
                return 0.0, 0.0
            (t0, m0, b0), (t1, m1, b1) = self._samples[0], self._samples[-1]
        span = max(t1 - t0, 1e-6)
        return (m1 - m0) / span, (b1 - b0) / span

    def partitions(self) -> dict[str, dict[str, Any]]:
        """Per owned partition: position, source end, lag in bytes and estimated messages."""
        if self.consumer_metrics is None:
            return {}
        out = {}
        for name, p in self.consumer_metrics().get("partitions", {}).items():
            topic = name.rsplit("-", 1)[0]
            label = (("topic", topic),)
            copied_bytes, copied_msgs = self.bytes.get(label, 0.0), self.messages.get(label, 0.0)
            lag = p.get("lag_bytes")
            estimate = lag * copied_msgs / copied_bytes if lag is not None and copied_bytes else None
            out[name] = {
                "position": p.get("position"),
                "log_end": p.get("log_end"),
                "lag_bytes": lag,
                "lag_messages_estimate": estimate,
                "active": p.get("active"),
            }
        return out

    def _gauges(self) -> Iterable[tuple[str, Labels, float]]:
        msgs, nbytes = self.rates()
        yield "messages_per_second", (), msgs
        yield "bytes_per_second", (), nbytes
        parts = self.partitions()
        yield "partitions_owned", (), float(len(parts))
        for name, p in parts.items():
            topic, partition = name.rsplit("-", 1)
            labels = (("topic", topic), ("partition", partition))
            if p["lag_bytes"] is not None:
                yield "lag_bytes", labels, float(p["lag_bytes"])
            if p["lag_messages_estimate"] is not None:
                yield "lag_messages_estimate", labels, float(p["lag_messages_estimate"])
        for halted_topic, halted_partition in list(self.halted):
            yield "partition_halted", (("topic", halted_topic), ("partition", str(halted_partition))), 1.0

    def _outage_samples(self) -> Iterable[Sample]:
        outage = self.outage
        yield "target_unavailable_seconds", (), outage.unavailable_s() if outage is not None else 0.0
        yield "target_outages_total", (), float(outage.outages) if outage is not None else 0.0
        if outage is not None:
            for step, count in list(outage.errors.items()):
                yield "target_errors_total", (("step", step),), float(count)

    def document(self) -> dict[str, Any]:
        """The status document (JSON-able)."""
        msgs, nbytes = self.rates()
        return {
            "pid": os.getpid(),
            "time": time.time(),
            "started": self.started,
            "messages_total": sum(self.messages.values()),
            "bytes_total": sum(self.bytes.values()),
            "messages_per_second": msgs,
            "bytes_per_second": nbytes,
            "gap_bytes_skipped": sum(self.gap_bytes.values()),
            "halted": {f"{t}-{p}": v for (t, p), v in self.halted.items()},
            "partitions": self.partitions(),
            "target": self.outage.document() if self.outage is not None else {},
        }


def write_status_file(path: str | Path, document: dict[str, Any]) -> None:
    """Replace the status file atomically (readers never see half a document)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(tmp, path)


__all__ = ["MirrorMetrics", "write_status_file"]
