"""The real-time consumer of the demo: a consumer group tailing the live cluster.

This is what a dashboard looks like with the client library: a ``GroupConsumer``
subscribed to the topics, pulling straight from the live datacenter's brokers, its
offsets in ZooKeeper under ``/consumers/dashboards`` (so ``logferry group describe
dashboards`` shows its lag). It counts messages per topic; the demo prints the rates.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

GROUP = "dashboards"


class Dashboard(threading.Thread):
    """Counts messages per topic as they arrive in the live cluster."""

    def __init__(self, zk: str, topics: list[str], client: Mapping[str, Any] | None = None):
        """``client``: more options of its group consumer (``tls=``, ``sasl=``)."""
        super().__init__(name="dashboard", daemon=True)
        self.client = dict(client or {})
        self.zk = zk
        self.topics = topics
        self.counts: dict[str, int] = defaultdict(int)
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._last: dict[str, int] = {}
        self._last_at = time.monotonic()

    def run(self) -> None:
        from broker.client import GroupConsumer

        try:
            with GroupConsumer(
                GROUP,
                topics=self.topics,
                zk=self.zk,
                start="earliest",
                auto_commit_ms=1000,
                consumer_id="demo-dashboard",
                **self.client,
            ) as consumer:
                self.ready.set()
                while not self.stop_event.is_set():
                    for message in consumer.poll(timeout=0.5):
                        self.counts[message.topic] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the demo
            self.error = exc
        finally:
            self.ready.set()

    def rates(self) -> dict[str, float]:
        """Messages per second per topic since the previous call."""
        now = time.monotonic()
        counts = dict(self.counts)
        span = max(now - self._last_at, 1e-6)
        rates = {t: (counts.get(t, 0) - self._last.get(t, 0)) / span for t in self.topics}
        self._last, self._last_at = counts, now
        return rates

    def stop(self, timeout: float = 15.0) -> None:
        self.stop_event.set()
        self.join(timeout)
