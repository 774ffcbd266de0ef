"""The console's own Prometheus metrics (``GET /metrics``), from its latest readings.

What the brokers cannot say about themselves: a consumer group's status by Burrow's
rules, and whether each cluster answered the console. Names (prefix
``logferry_console_``), used by ``etc/prometheus/logferry-alerts.yml``:

- ``cluster_up{cluster}``: 1 when the last reading of the cluster succeeded;
- ``brokers_up{cluster}``, ``under_replicated_partitions{cluster}``, ``offline_partitions{cluster}``,
  ``not_preferred_leader_partitions{cluster}``;
- ``group_status{cluster, group}``: 0 OK, 1 WARN, 2 REWIND, 3 STALL, 4 STOP;
- ``group_lag_bytes{cluster, group}``: the group's lag summed over its partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.client import STATUS_SEVERITY
from broker.common.metrics import Metrics, Sample

GAUGES = {
    "cluster_up": "1 when the console's last reading of the cluster succeeded",
    "brokers_up": "Brokers of the cluster registered and answering the console",
    "under_replicated_partitions": "Partitions with a replica out of sync or no leader",
    "offline_partitions": "Partitions without a leader",
    "not_preferred_leader_partitions": "Partitions led by a replica other than their in-sync preferred one "
    "(logferry topic elect-leaders hands them back)",
    "group_status": "Consumer group status by Burrow's rules: 0 OK, 1 WARN, 2 REWIND, 3 STALL, 4 STOP",
    "group_lag_bytes": "Consumer group lag in bytes, summed over its partitions",
}


def console_metrics(clusters: Callable[[], Iterable[dict[str, Any]]]) -> Metrics:
    """A registry whose gauges come from ``clusters()`` (the pollers' last readings)."""
    metrics = Metrics("logferry_console")

    def sample() -> Iterable[Sample]:
        for c in clusters():
            name = (("cluster", c["name"]),)
            yield "cluster_up", name, int(bool(c.get("ok")))
            if not c.get("ok"):
                continue
            summary = c["summary"]
            yield "brokers_up", name, summary["brokers_up"]
            yield "under_replicated_partitions", name, summary["under_replicated"]
            yield "offline_partitions", name, summary["offline"]
            yield "not_preferred_leader_partitions", name, summary.get("not_preferred", 0)
            for g in c["groups"]:
                labels = (("cluster", c["name"]), ("group", g["name"]))
                yield "group_status", labels, STATUS_SEVERITY.get(g["status"], 0)
                yield "group_lag_bytes", labels, g["lag_bytes"]

    metrics.gauge_source(sample, GAUGES)
    return metrics


__all__ = ["GAUGES", "console_metrics"]
