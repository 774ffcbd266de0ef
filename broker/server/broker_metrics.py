"""The broker's metrics: per-partition traffic, per-api requests, replication gauges.

Counters are updated on the hot paths (a dict lookup and an add); gauges are sampled
from the logs, connections, replicas and controller when the metrics are rendered.
The names are documented in ``docs/operations.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from typing import Any

from broker.common.metrics import Labels, Metrics, Sample
from broker.replication.manager import LEADER
from broker.storage.log_manager import LogManager


class PartitionCounter:
    """A counter keyed by (topic, partition) that caches its label tuples."""

    __slots__ = ("values", "_labels")

    def __init__(self, values: defaultdict[Labels, float]):
        self.values = values
        self._labels: dict[tuple[str, int], Labels] = {}

    def __getitem__(self, key: tuple[str, int]) -> float:
        return self.values[self._label(key)]

    def __setitem__(self, key: tuple[str, int], value: float) -> None:
        self.values[self._label(key)] = value

    def _label(self, key: tuple[str, int]) -> Labels:
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels[key] = (("topic", key[0]), ("partition", str(key[1])))
        return labels


class BrokerMetrics:
    """Every counter the broker records, and the gauges sampled on render.

    ``replication`` and ``controller`` are callables because those objects are made
    (or replaced) after the metrics are declared.
    """

    def __init__(
        self,
        metrics: Metrics,
        logs: LogManager,
        connections: Collection[Any],
        replication: Callable[[], Any],
        controller: Callable[[], Any],
        request_budget: Any = None,
    ):
        m = self.registry = metrics
        self.bytes_in = PartitionCounter(m.counter("bytes_in_total", "Bytes appended per partition"))
        self.messages_in = PartitionCounter(m.counter("messages_in_total", "Messages appended per partition"))
        self.bytes_out = PartitionCounter(m.counter("bytes_out_total", "Log bytes sent to fetchers per partition"))
        self.segments_deleted = PartitionCounter(m.counter("segments_deleted_total", "Segments deleted by retention"))
        self.requests = m.counter("requests_total", "Requests handled per api")
        self.request_errors = m.counter("request_errors_total", "Requests answered with an error per api")
        self.request_seconds = m.counter("request_seconds_total", "Time spent handling requests per api")
        self.produce_errors = m.counter("produce_errors_total", "Rejected message sets by error")
        self.produce_disk_full = m.counter(
            "produce_disk_full_total", "Message sets refused because their log dir was full"
        )
        self.authentication_failures = m.counter(
            "authentication_failures_total", "Failed SASL authentications per mechanism"
        )
        self.authorization_denied = m.counter(
            "authorization_denied_total", "Requests (or parts) the authorizer refused, by operation and resource type"
        )
        self.produce_duplicates = PartitionCounter(
            m.counter("produce_duplicates_total", "Idempotent producers' batches already held, not appended again")
        )
        self.isr_changes = m.counter("isr_changes_total", "ISR changes this broker wrote as leader, by direction")
        self.truncated_bytes = m.counter(
            "truncated_bytes_total", "Bytes a returning follower cut because its leader lacked them"
        )
        self.leader_elections = m.counter("leader_elections_total", "Leader changes this broker made as controller")
        self.replica_bytes_in = PartitionCounter(
            m.counter("replica_bytes_in_total", "Bytes a follower copied from its leader per partition")
        )
        self.replica_bytes_out = PartitionCounter(
            m.counter("replica_bytes_out_total", "Bytes sent to followers per partition")
        )
        self.connections_refused = m.counter(
            "connections_refused_total", "Connections closed at once: max_connections were open"
        )
        self.connections_timed_out = m.counter(
            "connections_timed_out_total", "Connections closed for owing a request past incomplete_request_timeout_ms"
        )
        self.read_holds = m.counter(
            "connection_read_holds_total",
            "Times the broker stopped reading a connection, by "
            "reason (budget: max_queued_request_bytes; unsent: answers not read)",
        )

        def gauges() -> Iterator[Sample]:
            for (topic, partition), plog in logs.logs():
                labels = (("topic", topic), ("partition", str(partition)))
                yield "log_end_offset", labels, plog.end_offset
                yield "log_visible_end", labels, plog.visible_end
                yield "log_start_offset", labels, plog.start_offset
                yield "log_size_bytes", labels, plog.size_bytes
                avg = plog.avg_message_bytes
                if avg:
                    sent = self.bytes_out.values.get(labels, 0)
                    yield "messages_out_estimate", labels, sent / avg
            yield "open_connections", (), len(connections)
            yield "connections_held", (), sum(1 for c in connections if getattr(c, "held", False))
            if request_budget is not None:
                yield "queued_request_bytes", (), request_budget.reserved
            replicas = replication()
            roles = replicas.role_counts()
            for role in ("leader", "follower", "offline"):
                yield "partitions", (("role", role),), roles.get(role, 0)
            yield "under_replicated_partitions", (), len(replicas.under_replicated())
            for key, replica in replicas.replicas.items():
                if replica.role == LEADER and replica.tracker is not None:
                    labels = (("topic", key[0]), ("partition", str(key[1])))
                    yield "isr_size", labels, len(replica.tracker.isr)
                    lags = replica.tracker.lag_bytes(replica.plog.end_offset)
                    yield "replica_max_lag_bytes", labels, max(lags.values(), default=0)
            active = controller()
            yield "controller_active", (), int(bool(active and active.active))
            if active is not None and active.active:
                yield "offline_partitions", (), active.offline_partitions

        m.gauge_source(
            gauges,
            {
                "log_end_offset": "Log end offset (bytes) per partition",
                "log_visible_end": "Visible end (high watermark) per partition",
                "log_start_offset": "First retained offset per partition",
                "log_size_bytes": "Bytes on disk per partition",
                "messages_out_estimate": "Messages sent to fetchers (bytes out / average message size)",
                "open_connections": "Open client connections",
                "connections_held": "Connections the broker stopped reading (budget or unsent answers)",
                "queued_request_bytes": "Bytes reserved for requests being read or handled",
                "partitions": "Hosted partitions per role (leader, follower, offline)",
                "under_replicated_partitions": "Led partitions whose ISR is smaller than the replica list",
                "isr_size": "In-sync replicas per led partition",
                "replica_max_lag_bytes": "Bytes the slowest follower is behind, per led partition",
                "controller_active": "1 on the broker that is the controller",
                "offline_partitions": "Partitions without a leader (controller only)",
            },
        )

    def count_request(self, api: str, seconds: float, error: bool = False) -> None:
        """Record one handled request."""
        labels = (("api", api),)
        self.requests[labels] += 1
        self.request_seconds[labels] += seconds
        if error:
            self.request_errors[labels] += 1


__all__ = ["BrokerMetrics", "PartitionCounter"]
