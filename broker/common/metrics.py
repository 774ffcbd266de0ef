"""Metrics for every logferry process: recorded cheaply, rendered by prometheus_client.

One implementation for the broker, the agent and the mirror (names in ``docs/operations.md``):

- :class:`Metrics` is one component's registry. Counters are plain dicts that the owner
  updates per batch or per request (a dict lookup and an add, no lock, never per
  message); gauges and snapshot-based counters come from *sources*, functions sampled
  at scrape time. It is a prometheus_client collector: on a scrape it turns those values
  into metric families, and prometheus_client writes the exposition text. Integer values
  stay Python ints until rendered, so they are exact up to 2**53 (what a Prometheus
  float64 sample can carry).
- :class:`~broker.common.metrics_server.MetricsServer` serves a :class:`Metrics` over
  HTTP; it is a module of its own so that a process without a metrics port never imports
  prometheus_client or an HTTP server (they cost every process start ~50 ms).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

Labels = tuple[tuple[str, str], ...]
"""A series' labels: ``(("topic", "logs"), ("partition", "0"))``; ``()`` for none."""

Sample = tuple[str, Labels, float]
"""What a source yields: ``(name, labels, value)``, the name without the prefix."""


class Metrics:
    """One component's metrics, all named ``<prefix>_<name>``.

    Counter names end in ``_total`` (Prometheus' rule, checked here so the rendered
    name is the declared one). Every family is declared with its help text; a family
    with no series yet still shows its ``# HELP`` and ``# TYPE`` lines.
    """

    def __init__(self, prefix: str = "logferry"):
        self.prefix = prefix
        self._counters: dict[str, defaultdict[Labels, float]] = {}
        self._kinds: dict[str, str] = {}
        self._help: dict[str, str] = {}
        self._sources: list[Callable[[], Iterable[Sample]]] = []

    def counter(self, name: str, help_text: str) -> defaultdict[Labels, float]:
        """Declare a counter; returns its labels -> value dict, which the owner adds to."""
        self._declare(name, "counter", help_text)
        return self._counters.setdefault(name, defaultdict(int))

    def source(
        self, fn: Callable[[], Iterable[Sample]], *, counters: Mapping[str, str] = {}, gauges: Mapping[str, str] = {}
    ) -> None:
        """Register ``fn``, called on every scrape, that yields ``(name, labels, value)``
        for the families declared here (name -> help text) by kind."""
        for name, help_text in counters.items():
            self._declare(name, "counter", help_text)
        for name, help_text in gauges.items():
            self._declare(name, "gauge", help_text)
        self._sources.append(fn)

    def gauge_source(self, fn: Callable[[], Iterable[Sample]], help_texts: Mapping[str, str]) -> None:
        """Register a function that yields ``(name, labels, value)`` gauges on each scrape."""
        self.source(fn, gauges=help_texts)

    def _declare(self, name: str, kind: str, help_text: str) -> None:
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name!r}: a counter's name ends in _total")
        if kind != "counter" and name.endswith("_total"):
            raise ValueError(f"{kind} {name!r}: only counters' names end in _total")
        if self._kinds.get(name, kind) != kind:
            raise ValueError(f"{name!r} is declared both as {self._kinds[name]} and as {kind}")
        if not help_text:
            raise ValueError(f"{name!r}: every metric needs a help text")
        self._kinds[name] = kind
        self._help[name] = help_text

    def snapshot(self) -> dict[str, dict[Labels, float]]:
        """Every series' value now, by name (for status commands and tests)."""
        out: dict[str, dict[Labels, float]] = {n: dict(v) for n, v in self._counters.items()}
        for fn in self._sources:
            for name, labels, value in fn():
                out.setdefault(name, {})[labels] = value
        return out

    def collect(self) -> list[Metric]:
        """The metric families now (prometheus_client's collector interface)."""
        # prometheus_client (with the HTTP modules it imports) costs ~50 ms of start: imported when rendered
        from prometheus_client.metrics_core import Metric

        series = self.snapshot()
        families = []
        for name in sorted(self._kinds.keys() | series.keys()):
            full = f"{self.prefix}_{name}"
            kind = self._kinds.get(name, "gauge")
            family = Metric(
                full.removesuffix("_total") if kind == "counter" else full, self._help.get(name, name), kind
            )
            for labels, value in sorted(series.get(name, {}).items()):
                family.add_sample(full, dict(labels), value)
            families.append(family)
        return families

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every family."""
        # as in collect(): prometheus_client costs ~50 ms of start, imported when rendered
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry).decode()


__all__ = ["Labels", "Metrics", "Sample"]
